"""The architecture, checked: model → store → engine → ops → cli, no arrow back up, and the
Engine the only way in for ``ops/`` and ``cli/``."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "flow_cli"

FORBIDDEN = {
    "model": (
        "flow_cli.store",
        "flow_cli.engine",
        "flow_cli.cli",
        "sqlite3",
        "sqlite_utils",
        "psycopg",
        "rich",
        "typer",
    ),
    "store": (
        "flow_cli.engine",
        "flow_cli.ops",
        "flow_cli.cli",
        "flow_cli.testing",
        "rich",
        "typer",
    ),
    "engine": ("flow_cli.ops", "flow_cli.cli", "flow_cli.testing", "rich", "typer"),
    "ops": ("flow_cli.cli", "flow_cli.testing", "rich", "typer"),
}
for _lower in ("model",):
    FORBIDDEN[_lower] = (*FORBIDDEN[_lower], "flow_cli.ops", "flow_cli.testing")


def _modules(layer: str) -> list[Path]:
    return sorted((PACKAGE / layer).rglob("*.py"))


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


def test_layers_import_only_downwards() -> None:
    offences = []
    for layer, banned in FORBIDDEN.items():
        for path in _modules(layer):
            for name in _imports(path):
                if name.startswith(banned):
                    offences.append(f"{path.relative_to(PACKAGE.parent)} imports {name}")
    assert offences == []


def test_cli_never_touches_sql() -> None:
    offences = [
        str(path.relative_to(PACKAGE.parent))
        for path in _modules("cli")
        if {"sqlite3", "sqlite_utils", "psycopg"} & {n.split(".")[0] for n in _imports(path)}
    ]
    assert offences == []


def test_cli_and_ops_go_through_the_engine() -> None:
    """``cli/`` and ``ops/`` never reach past the ``Engine`` into its store or streams."""
    offences = []
    for layer in ("cli", "ops"):
        for path in _modules(layer):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for node in ast.walk(tree):
                if isinstance(node, ast.Attribute) and node.attr in {"store", "streams"}:
                    offences.append(
                        f"{path.relative_to(PACKAGE.parent)}:{node.lineno} .{node.attr}"
                    )
    assert offences == []
