"""``flow export``, ``flow doctor`` and the bulk verbs read the runs filters select a page at a
time: with pages of two runs they write byte for byte what one page of a thousand writes, and
never ask the store for more than a page."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from triage_helpers import TriageProject, project_for

from flow_cli.engine import paging
from flow_cli.engine.engine import Engine
from flow_cli.store.protocol import RunFilter


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def proj(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TriageProject]:
    yield from project_for(request.param, tmp_path)


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[RunFilter]:
    """Every filter the commands pass to ``find_runs`` and ``run_states``."""
    seen: list[RunFilter] = []
    for name in ("find_runs", "run_states"):
        real = getattr(Engine, name)

        def spy(self: Engine, where: RunFilter, _real: Any = real) -> Any:
            seen.append(where)
            return _real(self, where)

        monkeypatch.setattr(Engine, name, spy)
    return seen


def outputs(proj: TriageProject, out: Path) -> dict[str, Any]:
    """What the read-only commands write, and the files an export writes."""
    found: dict[str, Any] = {}
    for args in (
        ("doctor",),
        ("doctor", "--json"),
        ("doctor", "--workflow", "approval"),
        ("cancel", "--workflow", "approval", "--dry-run"),
        ("cancel", "--status", "Suspended", "--dry-run", "--json"),
        ("cancel", "--status", "Suspended", "--dry-run", "--jsonl"),
        ("terminate", "--workflow", "approval", "--limit", "3", "--after", "ap-5", "--dry-run"),
        ("export", "--all", "-o", str(out), "--yes"),
        ("export", "--workflow", "approval", "-o", str(out), "--yes", "--json"),
        ("export", "--status", "Completed", "-o", str(out), "--yes", "--jsonl"),
    ):
        shutil.rmtree(out, ignore_errors=True)
        result = proj.invoke(*args)
        found[" ".join(args)] = (result.code, result.stdout, result.stderr)
        if out.exists():
            found[f"{args} files"] = {p.name: p.read_bytes() for p in sorted(out.iterdir())}
    return found


def test_pages_of_two_write_what_one_page_writes(
    proj: TriageProject, monkeypatch: pytest.MonkeyPatch, asked: list[RunFilter], tmp_path: Path
) -> None:
    for n in range(7):
        proj.setup("start", "approval", "--id", f"ap-{n}")
    proj.setup("start", "sleepy", "--id", "sl")
    proj.setup("start", "two-step", "--id", "ts", "--input", '{"n": 1}')
    proj.setup("tick", "--until-idle")
    out = tmp_path / "exported"
    whole = outputs(proj, out)
    assert whole["export --all -o " + str(out) + " --yes"][0] == 0
    assert len(whole[f"{('export', '--all', '-o', str(out), '--yes')} files"]) == 9
    asked.clear()
    monkeypatch.setattr(paging, "PAGE_SIZE", 2)
    paged = outputs(proj, out)
    assert paged == whole
    listed = [w for w in asked if w.limit is None or w.limit > 2]
    assert listed == []  # every read a page of at most two runs
    assert any(w.after is not None for w in asked)  # and the walk went on by the cursor


def test_a_bulk_verb_acts_on_every_page(
    proj: TriageProject, monkeypatch: pytest.MonkeyPatch, asked: list[RunFilter]
) -> None:
    for n in range(5):
        proj.setup("start", "approval", "--id", f"ap-{n}")
    proj.setup("tick", "--until-idle")
    monkeypatch.setattr(paging, "PAGE_SIZE", 2)
    refused = proj.invoke("cancel", "--workflow", "approval")
    assert refused.code == 2 and "5 runs match the filters" in refused.stderr
    done = proj.invoke("cancel", "--workflow", "approval", "--yes", "--json")
    assert done.code == 0, done.stderr
    assert [r["run_id"] for r in done.json()] == [f"ap-{n}" for n in range(4, -1, -1)]
    assert {r["result"] for r in done.json()} == {"done"}
    assert all(w.limit is not None and w.limit <= 2 for w in asked)
    again = proj.invoke("cancel", "--status", "Cancelling", "--yes")
    assert again.code == 0 and again.stdout.count("\tskipped\t") == 5


def test_an_export_by_filter_remembers_files_only_where_names_can_meet(
    proj: TriageProject, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from flow_cli.cli import cmd_bulk, export_files

    assert cmd_bulk._names_may_meet(tmp_path) is False  # this disk: case and é kept apart
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".flow-probe")] == []
    proj.setup("start", "two-step", "--id", "Order")
    proj.setup("start", "two-step", "--id", "order")
    proj.setup("tick", "--until-idle")
    # A disk that takes Order.json and order.json for one file: the second run fails, as when
    # the runs are named.
    monkeypatch.setattr(export_files, "export_file_name", lambda run_id: "order.json")
    monkeypatch.setattr(cmd_bulk, "_names_may_meet", lambda directory: True)
    out = tmp_path / "out"
    result = proj.invoke("export", "--workflow", "two-step", "-o", str(out), "--yes")
    assert result.code == 1
    assert result.stdout == (
        f"order\tdone\twrote {out}/order.json\n"
        f"Order\tfailed\t{out}/order.json already holds the export of run 'order'; not replaced\n"
    )
