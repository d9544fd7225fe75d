"""The architecture, checked: the model knows nothing of storage, the engine or the CLI."""

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
    "store": ("flow_cli.engine", "flow_cli.cli", "rich", "typer"),
    "engine": ("flow_cli.cli", "rich", "typer"),
}


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
        for path in sorted((PACKAGE / layer).glob("*.py")):
            for name in _imports(path):
                if name.startswith(banned):
                    offences.append(f"{path.relative_to(PACKAGE.parent)} imports {name}")
    assert offences == []


def test_cli_never_touches_sql() -> None:
    offences = [
        str(path.relative_to(PACKAGE.parent))
        for path in sorted((PACKAGE / "cli").glob("*.py"))
        if {"sqlite3", "sqlite_utils", "psycopg"} & {n.split(".")[0] for n in _imports(path)}
    ]
    assert offences == []
