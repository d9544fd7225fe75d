"""End to end through the real ``flow`` command, on SQLite and PostgreSQL: ``flow result``,
``flow execute`` and ``flow history --follow --exit-status`` (exit codes 0, 4, 5)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from triage_helpers import TriageProject, project_for


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def proj(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TriageProject]:
    yield from project_for(request.param, tmp_path)


def test_execute_drives_a_run_to_its_result(proj: TriageProject) -> None:
    done = proj.run("execute", "two-step", "--input", '{"n": 3}', "--id", "ex")
    assert done.code == 0, done.stderr
    assert proj.setup("show", "ex", "--json").json()["status"] == "Completed"
    assert done.stdout.replace(" ", "").replace("\n", "") == '{"result":12}'
    assert "run ex started" in done.stderr
    again = proj.invoke("result", "ex", "--json")
    assert again.json() == {
        "run_id": "ex",
        "outcome": {"kind": "Completed", "result": {"result": 12}},
    }


def test_execute_times_out_then_result_waits(proj: TriageProject) -> None:
    timed_out = proj.run("execute", "approval", "--id", "ap", "--timeout", "0.5s")
    assert (timed_out.code, timed_out.stdout) == (5, "")
    assert "timed out after 0.5s waiting for run ap (still Suspended)" in timed_out.stderr
    still = proj.run("result", "ap")
    assert (still.code, still.stdout) == (1, "")
    assert "has not ended (Suspended); add --wait" in still.error_line()
    proj.setup("signal", "ap", "approve", "--payload", '"yes"')
    proj.setup("tick", "--until-idle")
    waited = proj.run("result", "ap", "--wait", "--timeout", "30s")
    assert waited.code == 0 and '"approved": "yes"' in waited.stdout


def test_execute_of_a_run_whose_decision_fails_shows_the_failure(proj: TriageProject) -> None:
    """Issue 25, item 9: not only "timed out": the error and that the run is failing."""
    result = proj.run("execute", "broken", "--id", "bx", "--timeout", "1s")
    assert (result.code, result.stdout) == (5, "")
    lines = result.stderr.splitlines()
    assert lines[0] == "run bx started"
    assert lines[1] == (
        "run bx is failing: its workflow code failed with ValueError: boom [red]not markup"
        "[/red] (decision_failed); still waiting while it is retried with back-off"
    )
    assert lines[2] == (
        "error: timed out after 1s waiting for run bx, which is failing, not just slow: its "
        "workflow code failed with ValueError: boom [red]not markup[/red] (decision_failed; "
        "still Pending, retried with back-off). Fix the code and deploy it, or end the run "
        "with `flow terminate bx`."
    )
    assert len(lines) == 3
    waited = proj.run("result", "bx", "--wait", "--timeout", "0.2s")
    assert waited.code == 5
    assert (
        "which is failing, not just slow: its workflow code failed with ValueError"
        in (waited.stderr.splitlines()[-1])
    )


def test_a_wait_for_an_outcome_returns_as_the_run_ends(
    proj: TriageProject, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The end of a run makes no work ready; the wait must still hear of it at once (with
    # PostgreSQL it used to learn of it only at its next look, up to a second later). The
    # looks are spaced out here so that only a notification can end the wait early.
    from flow_cli.engine.engine import Engine
    from flow_cli.ops import waiting

    monkeypatch.setattr(waiting, "POLL_SECONDS", 60.0)

    proj.setup("start", "approval", "--id", "ap")
    proj.setup("tick", "--until-idle")
    waiter, ender = Engine.open(proj.database), Engine.open(proj.database)

    def end_soon() -> None:
        time.sleep(0.2)
        ender.terminate("ap", reason="called off")

    try:
        thread = threading.Thread(target=end_soon)
        thread.start()
        started = time.monotonic()
        waited = waiting.wait_for_outcome(waiter, "ap", timeout=30)
        elapsed = time.monotonic() - started
        thread.join()
    finally:
        waiter.close()
        ender.close()
    assert waited.outcome is not None and waited.status == "Cancelled"
    assert elapsed < 15


def test_a_run_that_ended_otherwise_is_exit_4(proj: TriageProject) -> None:
    proj.setup("start", "broken", "--id", "br")
    proj.setup("tick", "--until-idle")
    proj.setup("terminate", "br", "--reason", "no sku")
    result = proj.run("result", "br", "--wait")
    assert (result.code, result.stdout) == (4, "")
    assert '"reason":"no sku"' in result.stderr and "ended Cancelled" in result.stderr
    followed = proj.run("history", "br", "--follow", "--exit-status", "--json")
    assert followed.code == 4
    assert followed.stdout.splitlines()[-1].startswith('{"sequence"')
    proj.setup("start", "two-step", "--id", "ok", "--input", '{"n": 1}')
    proj.setup("tick", "--until-idle")
    assert proj.invoke("history", "ok", "--follow", "--exit-status").code == 0


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("result", "nope"), 2, "'nope' does not exist"),
        (("result", "nope", "--wait", "--timeout", "soon"), 2, "not a duration"),
        (("result", "nope", "--timeout", "1s"), 2, "--timeout goes with --wait"),
        (("execute", "no-such-workflow"), 2, "no-such-workflow"),
        (("history", "nope", "--exit-status"), 2, "--exit-status goes with --follow"),
    ],
)
def test_bad_input(proj: TriageProject, args: tuple[str, ...], code: int, message: str) -> None:
    proj.setup("start", "two-step", "--id", "x", "--input", '{"n": 1}')  # the database exists
    result = proj.invoke(*args)
    assert (result.code, result.stdout) == (code, ""), result.stderr
    assert message in result.error_line()
