"""The manual: README and docs/ cover every command, option and public ``ctx`` member, the
generated command-line reference is current, and the README's Python examples run."""

from __future__ import annotations

import re
import subprocess
import sys
import types
from pathlib import Path

import pytest

from flow_cli.cli.reference import cli_reference, option_names, root_command, walk
from flow_cli.model.context import WorkflowContext

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
README = ROOT / "README.md"


def _docs_text(*, generated: bool = True) -> str:
    paths = sorted(DOCS.glob("*.md"))
    return "\n".join(
        p.read_text(encoding="utf-8") for p in paths if generated or p.name != "cli.md"
    )


def test_the_cli_reference_is_current() -> None:
    path = DOCS / "cli.md"
    assert path.exists(), "docs/cli.md is missing; run python scripts/gen_docs.py"
    assert path.read_text(encoding="utf-8") == cli_reference(), (
        "docs/cli.md is stale; run python scripts/gen_docs.py"
    )


def test_the_generator_check_mode_agrees() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_docs.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert (done.returncode, done.stderr) == (0, "")


def test_every_command_and_option_is_in_the_docs() -> None:
    text = _docs_text()
    missing = []
    for path, command in walk(root_command()):
        if path and f"flow {' '.join(path)}" not in text:
            missing.append(f"flow {' '.join(path)}")
        for param in command.params:
            missing.extend(
                f"{' '.join(('flow', *path))} {name}"
                for name in option_names(param)
                if name not in ("--help", "-h") and name not in text
            )
    assert missing == [], f"not documented in docs/: {missing}"


def test_every_public_ctx_member_is_in_the_authoring_docs() -> None:
    text = _docs_text(generated=False)
    public = [name for name in dir(WorkflowContext) if not name.startswith("_")]
    missing = [name for name in public if f"ctx.{name}" not in text]
    assert missing == [], f"ctx members not documented in docs/: {missing}"


def test_the_readme_is_short_and_its_links_resolve() -> None:
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", text)
    assert links, "the README links to the manual"
    for link in links:
        if not link.startswith("http"):
            assert (ROOT / link).exists(), link
    for name in ("concepts", "authoring", "testing", "cli", "operations", "benchmarks"):
        assert f"docs/{name}.md" in text


def test_the_readme_python_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The workflow, the Engine example and the WorkflowEnvironment tests, as written."""
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
    workflow, engine_example, tests = blocks
    monkeypatch.chdir(tmp_path)
    shop = types.ModuleType("readme_shop")
    exec(compile(workflow, "README:workflow", "exec"), shop.__dict__)
    namespace = dict(shop.__dict__)
    exec(compile(engine_example, "README:engine", "exec"), namespace)
    assert namespace["snapshot"].status == "Completed"
    exec(compile(tests, "README:tests", "exec"), namespace)
    test_names = [name for name in namespace if name.startswith("test_")]
    assert len(test_names) == 2
    for name in test_names:
        namespace[name]()


def test_the_architecture_page_names_only_what_exists() -> None:
    """docs/architecture.md walks contributors through modules and names: each must exist."""
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    paths = set(re.findall(r"`((?:flow_cli|tests)/[\w/.]+\.py)`", text))
    missing = [p for p in sorted(paths) if not (ROOT / p).exists()]
    assert paths and missing == [], missing
    from flow_cli.store import index, protocol, sql

    for module, names in (
        (protocol, ["EventLog", "Scheduler", "RunQueries", "WorkerRegistry", "HandOffs"]),
        (index, ["index_for", "row_changes", "RowChanges", "DecidedRow"]),
        (sql, ["run_sets", "run_filter", "Dialect"]),
    ):
        assert [n for n in names if not hasattr(module, n)] == []
