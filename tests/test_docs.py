"""The manual: README and docs/ cover every command, option and public ``ctx`` member, the
generated command-line reference is current, the README's Python examples run, and every console
sample in docs/ prints what flow prints (tests/docs_harness.py runs them)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types
from pathlib import Path

import docs_harness
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


# -- console samples that show output are what flow prints ----------------------------------------


def test_checked_console_samples_are_what_flow_prints(tmp_path: Path) -> None:
    """Each page's checked console blocks, run in order as one session (tests/docs_harness.py
    says how); ``FLOW_DOCS_UPDATE=1`` rewrites the blocks with what flow prints now. The pages
    run side by side: a session mostly waits for the processes it starts."""
    from concurrent.futures import ThreadPoolExecutor

    update = os.environ.get("FLOW_DOCS_UPDATE") == "1"
    pages = docs_harness.pages()
    assert pages, f"no console block in docs/ is marked {docs_harness.CHECKED!r}"
    with ThreadPoolExecutor(max_workers=len(pages)) as pool:
        found = pool.map(
            lambda page: docs_harness.check_page(page, tmp_path / page.stem, update=update), pages
        )
        problems = [problem for page_problems in found for problem in page_problems]
    assert not problems, "\n\n".join(problems) + "\n(FLOW_DOCS_UPDATE=1 rewrites the blocks)"


def test_every_console_block_is_checked_or_says_why_not() -> None:
    """A new console sample is checked, or carries the reason it cannot be: docs don't go stale."""
    unmarked, unchecked = docs_harness.unchecked_blocks(sorted(DOCS.glob("*.md")))
    assert unmarked == [], (
        f"console blocks neither checked nor saying why not: {unmarked}; put "
        f"{docs_harness.CHECKED!r} or '<!-- output not checked: REASON -->' above each"
    )
    assert len(unchecked) <= MAX_UNCHECKED, unchecked


def test_an_unmarked_console_block_is_found(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        "```console\n$ flow runs\n```\n\n"
        "<!-- output not checked: needs PostgreSQL -->\n```console\n$ flow worker\n```\n"
        "```text\nflow upgrade --from B1\n```\n",
        encoding="utf-8",
    )
    unmarked, unchecked = docs_harness.unchecked_blocks([page])
    assert unmarked == ["page.md:1"]
    assert unchecked == ["page.md:6 (needs PostgreSQL)"]


MAX_UNCHECKED = 1
"""The console blocks that may stay unchecked, each with its reason (today: PostgreSQL with
workers on many machines). Raise it only for a sample no scratch directory can reproduce."""


def test_the_harness_blanks_only_what_varies() -> None:
    blank = docs_harness.blank
    assert (
        blank("vm:27741:8d89d8  vm  27741  2026-12-03 05:51:20Z") == "<worker>  vm  <pid>  <time>"
    )
    assert blank("order-0002-fork-b590e7 took 15s") == "order-0002-fork-<id> took <duration>"
    assert blank("order-0002 amount 24.0") == "order-0002 amount 24.0"
    assert docs_harness.matches("a\n...\nz", "a\nb\nc\nz")
    assert not docs_harness.matches("a\n...\nz", "a\nb\nc\ny")


def test_the_testing_guides_clock_sample_fails_as_documented() -> None:
    """docs/testing.md shows the error a workflow that reads the clock gets: run the sample."""
    from datetime import UTC, datetime, timedelta

    from flow_cli import Runtime
    from flow_cli.testing import WorkflowEnvironment

    text = (DOCS / "testing.md").read_text(encoding="utf-8")
    block = text[text.index('@runtime.workflow("reads-clock")') :]
    block = block[: block.index("```")]
    documented = " ".join(
        line.removeprefix("# ") for line in block.split("\n") if line.startswith("# ")
    )
    runtime = Runtime(build_id="docs-1")
    env = WorkflowEnvironment(runtime)
    code = "\n".join(line for line in block.split("\n") if not line.startswith("# "))
    namespace = {"runtime": runtime, "env": env, "datetime": datetime, "UTC": UTC}
    namespace["timedelta"] = timedelta
    with pytest.raises(Exception) as caught:
        exec(compile(code, "docs/testing.md", "exec"), namespace)
    printed = f"{type(caught.value).__name__}: {caught.value}"
    # The documented text with "…" for what changes from run to run.
    pattern = ".*".join(re.escape(part) for part in documented.split("…"))
    assert re.fullmatch(pattern, printed), (documented, printed)


def test_concepts_names_the_envelope_attributes_python_has() -> None:
    from flow_cli.model.events import EventEnvelope

    text = (DOCS / "concepts.md").read_text(encoding="utf-8")
    named = re.findall(r"`\.(\w+)`", text[text.index("## History") :][:1500])
    assert "event" in named and "data" not in named
    for attribute in named:
        if attribute == "to_data":
            continue
        assert hasattr(EventEnvelope, attribute) or attribute in EventEnvelope.__dataclass_fields__


def test_every_bench_script_the_benchmarks_cite_is_in_the_repository() -> None:
    text = (DOCS / "benchmarks.md").read_text(encoding="utf-8")
    paths = set(re.findall(r"`((?:\.\./)?[\w.-]*/[\w./-]*\.(?:py|sh))", text))
    names = set(re.findall(r"`(\w+\.(?:py|sh))[ `]", text))  # bare: in bench/ or its harness
    assert paths and names
    places = (ROOT, ROOT / "bench", ROOT / "bench" / "peers", ROOT / "bench" / "peers" / "flow")
    missing = sorted(
        cited for cited in paths | names if not any((place / cited).exists() for place in places)
    )
    assert missing == [], f"docs/benchmarks.md cites scripts that are not here: {missing}"


def test_the_harness_runs_a_page_as_one_session_and_reports_a_stale_sample(
    tmp_path: Path,
) -> None:
    """Setup steps and blocks share one directory in page order; a stale output is reported,
    and the update mode rewrites it with what was printed."""
    page = tmp_path / "page.md"
    page.write_text(
        "Intro.\n\n"
        "<!-- setup:\necho hidden > state.txt\n-->\n"
        f"{docs_harness.CHECKED}\n"
        "```console\n$ cat state.txt\nhidden\n$ echo one \\\n    two\none two\n```\n\n"
        "<!-- setup: echo changed >> state.txt -->\n"
        f"{docs_harness.CHECKED}\n"
        "```console\n$ cat state.txt\nhidden\n...\n$ wc -l < state.txt\n3\n```\n",
        encoding="utf-8",
    )
    problems = docs_harness.check_page(page, tmp_path / "run", update=False)
    assert len(problems) == 1 and "$ wc -l < state.txt" in problems[0], problems
    assert docs_harness.check_page(page, tmp_path / "again", update=True)
    assert docs_harness.check_page(page, tmp_path / "after", update=False) == []
    assert "$ wc -l < state.txt\n2\n```" in page.read_text(encoding="utf-8")


def test_a_failing_setup_step_is_reported(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    page.write_text(
        f"<!-- setup: exit 3 -->\n{docs_harness.CHECKED}\n```console\n$ true\n```\n",
        encoding="utf-8",
    )
    problems = docs_harness.check_page(page, tmp_path / "run", update=False)
    assert len(problems) == 1 and "setup exited 3" in problems[0]
