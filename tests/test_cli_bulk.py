"""End to end through the real ``flow`` command, on SQLite and PostgreSQL: ``flow terminate`` and
the bulk forms of ``cancel``, ``terminate``, ``signal``, ``export`` and ``start --from-jsonl``."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from triage_helpers import TriageProject, project_for


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def proj(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TriageProject]:
    yield from project_for(request.param, tmp_path)


def lines(text: str) -> list[list[str]]:
    return [line.split("\t") for line in text.splitlines()]


def test_terminate_ends_a_run_whose_code_always_raises(proj: TriageProject) -> None:
    proj.setup("start", "broken", "--id", "br")
    proj.setup("start", "two-step", "--id", "ts", "--input", '{"n": 1}')
    proj.setup("tick", "--until-idle")
    proj.setup("cancel", "br")
    proj.setup("tick", "--until-idle")
    assert proj.setup("show", "br", "--json").json()["status"] == "Cancelling"  # stuck
    done = proj.run("terminate", "br", "--reason", "bad input")
    assert (done.code, done.stdout) == (0, "br\tdone\tterminated\n"), done.stderr
    shown = proj.setup("show", "br", "--json").json()
    assert shown["status"] == "Cancelled"
    assert shown["outcome"] == {"kind": "Cancelled", "reason": "bad input", "forced": True}
    [last] = proj.setup("history", "br", "--json").json()[-1:]
    assert (last["event_key"], last["data"]) == (
        "run_cancelled",
        {"reason": "bad input", "forced": True},
    )
    # Again: nothing to do, nothing written. A run that completed is skipped too.
    again = proj.invoke("terminate", "br", "ts", "--json")
    assert again.code == 0
    assert again.json() == [
        {"run_id": "br", "result": "skipped", "detail": "already Cancelled"},
        {"run_id": "ts", "result": "skipped", "detail": "already Completed"},
    ]
    unknown = proj.run("terminate", "nope")
    assert (unknown.code, unknown.stdout) == (2, "")
    assert "'nope' does not exist" in unknown.error_line()


def test_terminate_cancels_started_steps_and_children(proj: TriageProject) -> None:
    proj.setup("start", "parent", "--id", "pa")
    proj.setup("tick")  # decides the parent: child started, not yet decided
    assert proj.setup("runs", "--json").json()[0]["run_id"] == "pa/kid"
    result = proj.invoke("terminate", "pa", "--reason", "deploy went wrong")
    assert result.code == 0, result.stderr
    keys = [e["event_key"] for e in proj.setup("history", "pa", "--json").json()]
    assert keys[-2:] == ["child_cancelled", "run_cancelled"]
    # The child follows its policy ("cancel"): it is asked to cancel, in the same commit.
    assert "cancel_requested" in [
        e["event_key"] for e in proj.setup("history", "pa/kid", "--json").json()
    ]


def test_bulk_cancel_by_filter_needs_yes_and_is_idempotent(proj: TriageProject) -> None:
    for n in range(3):
        proj.setup("start", "approval", "--id", f"ap-{n}")
    proj.setup("start", "sleepy", "--id", "sl")
    proj.setup("tick", "--until-idle")
    before = proj.setup("history", "ap-0", "--json").json()
    refused = proj.run("cancel", "--waiting-on", "signal:approve")
    assert (refused.code, refused.stdout) == (2, "")
    assert "3 runs match the filters; add --yes" in refused.error_line()
    assert proj.setup("history", "ap-0", "--json").json() == before
    dry = proj.invoke("cancel", "--workflow", "approval", "--dry-run")
    assert [row[0] for row in lines(dry.stdout)] == ["ap-2", "ap-1", "ap-0"]
    assert proj.setup("history", "ap-0", "--json").json() == before
    done = proj.run("cancel", "--workflow", "approval", "--reason", "closing shop", "--yes")
    assert done.code == 0, done.stderr
    assert lines(done.stdout) == [[f"ap-{n}", "done", "cancellation requested"] for n in (2, 1, 0)]
    assert "3 done, 0 skipped, 0 failed" in done.stderr
    again = proj.invoke("cancel", "--workflow", "approval", "--yes", "--jsonl")
    assert [json.loads(line)["result"] for line in again.stdout.splitlines()] == ["skipped"] * 3
    proj.setup("tick", "--until-idle")
    assert proj.setup("count", "--status", "Cancelled", "--json").json()["total"] == 3
    assert proj.setup("show", "sl", "--json").json()["status"] == "Suspended"
    nothing = proj.invoke("cancel", "--workflow", "nothing", "--yes")
    assert (nothing.code, nothing.stdout) == (0, "")
    assert "nothing done" in nothing.stderr
    assert proj.invoke("cancel", "--workflow", "nothing", "--json").json() == []


def test_bulk_signal_from_stdin_reports_each_run(proj: TriageProject) -> None:
    proj.setup("start", "approval", "--id", "a1")
    proj.setup("start", "two-step", "--id", "done", "--input", '{"n": 1}')
    proj.setup("tick", "--until-idle")
    piped = proj.setup("runs", "--waiting-on", "signal:approve", "--jsonl").stdout
    result = proj.run("signal", "-", "approve", "--payload", "true", stdin=piped + "done\nnope\n")
    assert result.code == 1
    rows = lines(result.stdout)
    assert rows[0] == ["a1", "done", "signal 'approve' delivered"]
    assert rows[1][:2] == ["done", "failed"] and "already ended" in rows[1][2]
    assert rows[2][:2] == ["nope", "failed"] and "does not exist" in rows[2][2]
    proj.setup("tick", "--until-idle")
    assert proj.setup("show", "a1", "--json").json()["outcome"] == {
        "kind": "Completed",
        "result": {"approved": True},
    }
    by_filter = proj.invoke("signal", "approve", "--workflow", "nothing", "--yes")
    assert by_filter.code == 0
    missing = proj.invoke("signal", "approve")
    assert missing.code == 2


def test_bulk_export_writes_one_file_per_run(proj: TriageProject, tmp_path: Path) -> None:
    proj.setup("start", "parent", "--id", "pa")
    proj.setup("tick", "--until-idle")
    out = tmp_path / "exports"
    result = proj.run("export", "--status", "Completed", "-o", str(out), "--yes")
    assert result.code == 0, result.stderr
    assert sorted(p.name for p in out.iterdir()) == ["pa%2Fkid.json", "pa.json"]
    assert json.loads((out / "pa%2Fkid.json").read_text())["run_id"] == "pa/kid"
    again = proj.invoke("export", "-", "-o", str(out), stdin="pa\n")
    assert again.code == 0 and again.stdout.startswith("pa\tdone\twrote ")
    no_dir = proj.invoke("export", "--status", "Completed", "--yes")
    assert no_dir.code == 2 and "-o DIR" in no_dir.stderr


def test_start_from_jsonl_is_idempotent(proj: TriageProject, tmp_path: Path) -> None:
    feed = tmp_path / "orders.jsonl"
    feed.write_text(
        "\n".join(
            json.dumps(line)
            for line in [
                {"run_id": "s1", "workflow": "two-step", "input": {"n": 1}},
                {"run_id": "s2", "workflow": "two-step", "input": {"n": 2}, "build_id": "cli-1"},
                {"run_id": "s3", "workflow": "no-such-workflow", "input": None},
            ]
        )
        + "\n"
    )
    first = proj.run("start", "--from-jsonl", str(feed))
    assert first.code == 1
    rows = lines(first.stdout)
    assert rows[:2] == [["s1", "done", "line 1: created"], ["s2", "done", "line 2: created"]]
    assert rows[2][:2] == ["s3", "failed"]
    feed.write_text(feed.read_text().splitlines()[0] + "\n" + feed.read_text().splitlines()[1])
    again = proj.invoke("start", "--from-jsonl", "-", "--json", stdin=feed.read_text())
    assert again.code == 0
    assert [r["result"] for r in again.json()] == ["skipped", "skipped"]
    assert proj.setup("count", "--json").json()["total"] == 2
    bad = proj.invoke("start", "--from-jsonl", "-", stdin="{not json}\n")
    assert bad.code == 2 and "line 1 is not JSON" in bad.stderr


def test_open_hooks_are_listed_and_resolved_from_a_pipeline(proj: TriageProject) -> None:
    for n in range(3):
        proj.setup("start", "callback", "--id", f"cb-{n}")
    proj.setup("tick", "--until-idle")
    listed = proj.run("hook", "list", "--open", "--jsonl")
    assert listed.code == 0 and listed.stdout.count("\n") == 3
    resolved = proj.run("hook", "resolve", "-", "--payload", '"ok"', stdin=listed.stdout + "bad\n")
    assert resolved.code == 1
    rows = lines(resolved.stdout)
    assert sorted(row[0] for row in rows[:3]) == ["cb-0", "cb-1", "cb-2"]
    assert rows[3][:2] == ["bad", "failed"]
    proj.setup("tick", "--until-idle")
    assert proj.setup("count", "--status", "Completed", "--json").json()["total"] == 3
    assert proj.setup("hook", "list", "--open", "--json").json() == []
