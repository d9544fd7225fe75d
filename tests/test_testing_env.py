"""DESIGN §2.3: ``flow_cli.testing.WorkflowEnvironment`` — in memory, a manual clock, and every
decision replayed, so a 30-day approval with reminders tests in well under a second."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from flow_cli import TIMED_OUT, Runtime, WorkflowContext
from flow_cli.errors import WorkflowError
from flow_cli.model.commands import RuntimeCommand
from flow_cli.model.status import RunStatus
from flow_cli.testing import DEFAULT_START, WorkflowEnvironment

REMIND_EVERY = timedelta(days=7)
EXPIRE_AFTER = timedelta(days=30)
ROUNDS_PER_RUN = 2

approvals = Runtime(build_id="approvals-1")
reminded: list[int] = []


@approvals.step("remind")
def remind(input: dict[str, int], info: object) -> None:
    reminded.append(input["round"])


@approvals.step("notify")
def notify(input: object, info: object) -> object:
    return input


@approvals.workflow("approval")
def approval(ctx: WorkflowContext) -> RuntimeCommand:
    """Wait for a decision for 30 days from the chain's start, reminding every 7 days; a
    fresh history every two rounds (continue_as_new)."""
    expires = ctx.chain_started_at + EXPIRE_AFTER
    first = ctx.input["round"]
    for k in range(first, first + ROUNDS_PER_RUN):
        round_end = min(ctx.chain_started_at + REMIND_EVERY * (k + 1), expires)
        answer = ctx.receive(f"decision-{k}", "decision", deadline=round_end)
        if answer is not TIMED_OUT:
            ctx.step("notify", notify, {"approved": answer["ok"]})
            return ctx.complete({"approved": answer["ok"], "round": k, "by": ctx.first_run_id})
        if round_end >= expires:
            return ctx.complete({"approved": False, "expired_at": ctx.now.isoformat()})
        ctx.step(f"remind-{k}", remind, {"round": k})
    return ctx.continue_as_new({"round": first + ROUNDS_PER_RUN})


def test_approval_answered_after_two_reminders_and_a_continuation() -> None:
    reminded.clear()
    env = WorkflowEnvironment(approvals)
    run = env.start("approval", {"round": 0}, run_id="po-7")
    env.run_until_idle()

    env.advance(days=15)  # rounds 0 and 1 time out; the run continues as new into po-7~1
    assert reminded == [0, 1]
    assert env.snapshot(run).status is RunStatus.CONTINUED_AS_NEW
    assert env.outcome(run) is None  # the chain is still live

    env.signal(run, "decision", {"ok": True})  # follows the chain to po-7~1

    assert env.result(run) == {"approved": True, "round": 2, "by": "po-7"}
    assert env.snapshot("po-7~1").steps["notify"].output == {"approved": True}


def test_approval_expires_after_thirty_days() -> None:
    reminded.clear()
    env = WorkflowEnvironment(approvals)
    run = env.start("approval", {"round": 0})

    env.advance(days=31)

    assert reminded == [0, 1, 2, 3]  # days 7, 14, 21 and 28
    expired_at = DEFAULT_START + EXPIRE_AFTER
    assert env.result(run) == {"approved": False, "expired_at": expired_at.isoformat()}
    assert env.now == DEFAULT_START + timedelta(days=31)


def test_skip_to_next_timer_moves_to_the_next_deadline() -> None:
    env = WorkflowEnvironment(approvals)
    run = env.start("approval", {"round": 0})
    env.run_until_idle()
    assert env.skip_to_next_timer() == DEFAULT_START + REMIND_EVERY
    assert env.now == DEFAULT_START + REMIND_EVERY
    assert env.snapshot(run).steps["remind-0"].output is None  # it ran (returned None)
    assert "decision-1" in env.snapshot(run).signal_waits


def test_a_clock_read_fails_the_test_at_the_first_decision() -> None:
    rt = Runtime(build_id="clock-reader")

    @rt.workflow("reads-clock")
    def reads_clock(ctx: WorkflowContext) -> RuntimeCommand:
        ctx.sleep_until("nap", datetime.now(UTC) + timedelta(hours=1))  # the mistake
        return ctx.complete(None)

    env = WorkflowEnvironment(rt)
    env.start("reads-clock")
    with pytest.raises(WorkflowError, match=r"called datetime\.now\(\) while deciding") as raised:
        env.run_until_idle()
    assert "Hint: use ctx.now instead" in str(raised.value)


def test_a_workflow_exception_fails_the_test() -> None:
    rt = Runtime(build_id="raises")

    @rt.workflow("raises")
    def raises(ctx: WorkflowContext) -> RuntimeCommand:
        raise KeyError("missing")

    env = WorkflowEnvironment(rt)
    env.start("raises")
    with pytest.raises(WorkflowError, match="KeyError"):
        env.run_until_idle()

    quiet = WorkflowEnvironment(rt, fail_on_decision_error=False)
    run = quiet.start("raises")
    quiet.run_until_idle()
    assert quiet.snapshot(run).decision_error is not None


def test_cancel_and_result_of_a_run_that_did_not_complete() -> None:
    env = WorkflowEnvironment(approvals)
    run = env.start("approval", {"round": 0})
    env.run_until_idle()
    env.cancel(run)
    outcome = env.outcome(run)
    assert outcome is not None and outcome.kind is RunStatus.CANCELLED
    with pytest.raises(Exception, match="did not complete"):
        env.result(run)


def test_a_workflow_that_returns_no_command_is_reported_once() -> None:
    rt = Runtime(build_id="no-return-1")

    @rt.workflow("forgetful")
    def forgetful(ctx: WorkflowContext) -> RuntimeCommand:
        ctx.complete("done")
        return None  # type: ignore[return-value]

    env = WorkflowEnvironment(rt)
    run = env.start("forgetful", run_id="f")
    with pytest.raises(WorkflowError) as caught:
        env.run_until_idle()
    message = str(caught.value)
    assert message.count("workflow code failed with") == 1, message
    assert message.startswith("Run 'f': workflow code failed with InvalidCommand: workflow ")
    [failed] = [e for e in env.history(run) if e.event_key == "decision_failed"]
    assert failed.event.to_data()["error_type"] == "InvalidCommand"
