"""DESIGN §2.2: ctx.now, ctx.sleep, receive/hook with a deadline, all_steps/all_children,
chain fields across continue_as_new, short batch ids — run in ``WorkflowEnvironment``."""

from __future__ import annotations

from datetime import timedelta

import pytest

from flow_cli import TIMED_OUT, RetryPolicy, Runtime, StepFailedError
from flow_cli.model.status import RunStatus
from flow_cli.testing import DEFAULT_START, WorkflowEnvironment

SURFACE = RetryPolicy(max_attempts=1, on_exhausted="surface")


def _runtime() -> Runtime:
    rt = Runtime(build_id="helpers-1")

    @rt.step("echo")
    def echo(input, info):
        return input

    @rt.step("boom")
    def boom(input, info):
        raise ValueError("boom")

    @rt.workflow("nap-after-step")
    def nap_after_step(ctx):
        ctx.step("work", echo, 1)
        ctx.sleep("nap", timedelta(minutes=1))
        return ctx.complete(ctx.now.isoformat())

    @rt.workflow("answer-or-timeout")
    def answer_or_timeout(ctx):
        answer = ctx.receive("answer", "answer", deadline=ctx.started_at + timedelta(hours=1))
        if answer is TIMED_OUT:
            late = ctx.receive("late", "answer")
            return ctx.complete({"timed_out": True, "late": late})
        return ctx.complete({"answer": answer})

    @rt.workflow("hook-or-timeout")
    def hook_or_timeout(ctx):
        payload = ctx.hook("approval", deadline=ctx.started_at + timedelta(hours=1))
        if payload is TIMED_OUT:
            return ctx.complete("timed out")
        return ctx.complete(payload)

    @rt.workflow("fan-in")
    def fan_in(ctx):
        n = ctx.input["steps"]
        outputs = ctx.all_steps([ctx.schedule_step(f"s{i}", echo, i) for i in range(n)])
        kids = ctx.all_children([ctx.start_child(f"k{i}", "leaf", i) for i in range(5)])
        return ctx.complete({"sum": sum(outputs), "kids": [k.result for k in kids]})

    @rt.workflow("leaf")
    def leaf(ctx):
        return ctx.complete(ctx.input * 10)

    @rt.workflow("fan-in-fails")
    def fan_in_fails(ctx):
        try:
            ctx.all_steps(
                [ctx.schedule_step("a", echo, 1), ctx.schedule_step("b", boom, 2, SURFACE)]
            )
        except StepFailedError as exc:
            return ctx.complete({"failed": exc.step_id})
        return ctx.complete("unreachable")

    @rt.workflow("chain")
    def chain(ctx):
        generation = ctx.input["generation"]
        if generation < 2:
            ctx.sleep(f"pause-{generation}", timedelta(days=1))
            return ctx.continue_as_new({"generation": generation + 1})
        return ctx.complete(
            {
                "first_run_id": ctx.first_run_id,
                "chain_started_at": ctx.chain_started_at.isoformat(),
                "started_at": ctx.started_at.isoformat(),
            }
        )

    return rt


@pytest.fixture
def env() -> WorkflowEnvironment:
    return WorkflowEnvironment(_runtime())


def test_sleep_counts_from_ctx_now_at_the_decision_that_opens_it(
    env: WorkflowEnvironment,
) -> None:
    run = env.start("nap-after-step")
    env.engine.decide(run)  # schedules the step only
    env.clock.advance(timedelta(minutes=10))  # the step runs ten minutes later
    env.run_until_idle()

    wait = env.snapshot(run).waits["nap"]
    assert wait.deadline == DEFAULT_START + timedelta(minutes=11)
    env.skip_to_next_timer()
    assert env.result(run) == (DEFAULT_START + timedelta(minutes=11)).isoformat()


def test_receive_returns_the_signal_that_came_first(env: WorkflowEnvironment) -> None:
    run = env.start("answer-or-timeout")
    env.run_until_idle()
    assert set(env.snapshot(run).signal_waits) == {"answer"}
    assert set(env.snapshot(run).waits) == {"answer:deadline"}  # opened by a second decision
    assert env.snapshot(run).status is RunStatus.SUSPENDED

    env.signal(run, "answer", {"ok": True})

    assert env.result(run) == {"answer": {"ok": True}}


def test_receive_returns_timed_out_and_keeps_a_late_signal(env: WorkflowEnvironment) -> None:
    run = env.start("answer-or-timeout")
    env.run_until_idle()
    env.advance(hours=1)
    assert env.snapshot(run).status is RunStatus.SUSPENDED  # now waiting on "late"

    env.signal(run, "answer", "after the deadline")

    assert env.result(run) == {"timed_out": True, "late": "after the deadline"}
    assert not env.snapshot(run).signal_waits["answer"].delivered


def test_a_timed_out_signal_wait_is_no_longer_open(env: WorkflowEnvironment) -> None:
    run = env.start("answer-or-timeout")
    env.run_until_idle()
    env.advance(hours=1)
    snap = env.snapshot(run)
    # Only the "late" wait is open: the timed-out one is neither counted nor indexed as waiting.
    assert snap.signal_waits["answer"].timed_out
    assert snap.progress()["waits_open"] == 1
    assert env.engine.get_run(run).waiting_on == "signal:answer"
    assert snap.to_json()["signals"]["waits"]["answer"]["timed_out"] is True


def test_a_signal_sent_early_is_delivered_without_a_timer(env: WorkflowEnvironment) -> None:
    env.engine.eager_start = False  # the signal must come before the first decision
    run = env.start("answer-or-timeout")
    env.engine.signal(run, "answer", 42)
    env.run_until_idle()
    assert env.result(run) == {"answer": 42}
    assert env.snapshot(run).waits == {}


def test_hook_with_a_deadline(env: WorkflowEnvironment) -> None:
    answered = env.start("hook-or-timeout", run_id="answered")
    silent = env.start("hook-or-timeout", run_id="silent")
    env.run_until_idle()
    token = env.snapshot(answered).hooks["approval"].token

    env.resolve_hook(token, {"approved": True})
    env.advance(hours=2)
    late = env.snapshot(silent).hooks["approval"].token

    assert env.result(answered) == {"approved": True}
    assert env.result(silent) == "timed out"
    with pytest.raises(Exception, match="already ended"):
        env.resolve_hook(late, {"approved": True})


def test_all_steps_and_all_children(env: WorkflowEnvironment) -> None:
    run = env.start("fan-in", {"steps": 50})
    env.run_until_idle()
    assert env.result(run) == {"sum": sum(range(50)), "kids": [0, 10, 20, 30, 40]}
    snapshot = env.snapshot(run)
    batches = {s.batch_id for s in snapshot.steps.values()}
    (batch_id,) = batches
    assert batch_id.startswith("b-") and len(batch_id) == 14  # not 50 ids joined with "+"
    assert {c.batch_id for c in snapshot.children.values()} == {"k0+k1+k2+k3+k4"}


def test_all_steps_raises_step_failed_for_a_surfaced_failure(env: WorkflowEnvironment) -> None:
    run = env.start("fan-in-fails")
    env.run_until_idle()
    assert env.result(run) == {"failed": "b"}


def test_chain_started_at_and_first_run_id_survive_continue_as_new(
    env: WorkflowEnvironment,
) -> None:
    run = env.start("chain", {"generation": 0}, run_id="chain")
    env.advance(days=3)
    result = env.result(run)
    assert result["first_run_id"] == "chain"
    assert result["chain_started_at"] == DEFAULT_START.isoformat()
    assert result["started_at"] == (DEFAULT_START + timedelta(days=2)).isoformat()
    first_spec = env.history("chain")[0].event.to_data()["spec"]
    assert "first_run_id" not in first_spec and "chain_started_at" not in first_spec


def test_a_callback_after_the_deadline_does_not_change_the_answer() -> None:
    rt = Runtime(build_id="late-hook")

    @rt.workflow("late")
    def late(ctx):
        payload = ctx.hook("h", deadline=ctx.started_at + timedelta(hours=1))
        ctx.sleep("after", timedelta(days=1))
        return ctx.complete("timed out" if payload is TIMED_OUT else payload)

    env = WorkflowEnvironment(rt)
    run = env.start("late")
    env.advance(hours=2)  # the deadline passed; the run sleeps
    env.resolve_hook(env.snapshot(run).hooks["h"].token, "too late")
    env.advance(days=1)
    assert env.result(run) == "timed out"


def test_one_wait_id_used_twice_in_a_decision_is_refused() -> None:
    rt = Runtime(build_id="twice")

    @rt.workflow("twice")
    def twice(ctx):
        ctx.timer("t", ctx.started_at + timedelta(hours=1))
        ctx.sleep_until("t", ctx.started_at + timedelta(hours=1))
        return ctx.complete(None)

    env = WorkflowEnvironment(rt, fail_on_decision_error=False)
    run = env.start("twice")
    env.run_until_idle()
    error = env.snapshot(run).decision_error
    assert error is not None
    (mismatch,) = error.mismatches  # type: ignore[misc]
    assert (mismatch["identity"], mismatch["field"]) == ("timer 't'", "id")
