"""Workflows and helpers shared by the engine scenario tests (``tests/test_engine_*.py``).

Runtimes are built by factory functions, so a test can deploy "build A" and then a changed or a
fixed copy of the same code under the same build id, as an operator would.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any

from flow_cli import RetryPolicy, Runtime, StepFailedError
from flow_cli.engine.engine import Engine
from flow_cli.model.clock import ManualClock
from flow_cli.model.events import TERMINAL_KEYS, EventEnvelope
from flow_cli.model.status import StepStatus
from flow_cli.store.protocol import EventStore

# -- the seed's exchange-rate flow (DESIGN.md section 2, as written there) ----------------------

runtime = Runtime(build_id="shop-2026.12.1", patches=["tax-rounding-fix"])


@runtime.workflow("exchange-rate")
def exchange_rate(ctx):
    if (rate := ctx.step_output("read-rate")) is not None:
        return ctx.complete(rate)
    return ctx.schedule_step("read-rate", "readExchangeRate", {"pair": "CNY/USD"})


@runtime.step("readExchangeRate")
def read_exchange_rate(input, info):  # info: run_id, step_id, attempt, idempotency_key(...)
    return {"pair": input["pair"], "rate": 0.1384}


# -- helpers ------------------------------------------------------------------------------------


def make_engine(
    store: EventStore,
    runtimes: Iterable[Runtime],
    clock: ManualClock,
    name: str = "w1",
    *,
    eager_start: bool = True,
) -> Engine:
    """An engine with a fixed worker id (so histories are comparable between runs).

    ``eager_start=False`` for a test about what happens between a run's creation and its
    first decision: the starter then leaves that decision to the workers.
    """
    return Engine(store, list(runtimes), clock=clock, worker_id=name, eager_start=eager_start)


def keys(engine: Engine, run_id: str) -> list[str]:
    return [e.event.event_key() for e in engine.history(run_id)]


def events(engine: Engine, run_id: str, key: str) -> list[EventEnvelope]:
    return [e for e in engine.history(run_id) if e.event.event_key() == key]


def data(engine: Engine, run_id: str, key: str) -> list[dict[str, Any]]:
    return [e.event.to_data() for e in events(engine, run_id, key)]


def hang_step(engine: Engine, run_id: str, step_id: str, lease_seconds: float = 3600.0) -> None:
    """Start ``step_id``'s attempt as a worker that then hangs (or died): ``step_started`` is
    committed with a long lease and the attempt never finishes. Other ready steps leased on the
    way are run to their end, so the only open attempt is the hung one."""
    hung = Engine(
        engine.store, list(engine.runtimes.values()), clock=engine.clock, worker_id="hung-worker"
    )
    # Leasing records step_started in the same transaction: not running it is hanging.
    leases = hung.work.lease_steps(lease_seconds, 100)
    target = [lease for lease in leases if (lease.run_id, lease.step_id) == (run_id, step_id)]
    if len(target) != 1:
        raise AssertionError(f"step {step_id!r} of {run_id!r} is not ready: {leases}")
    for lease in leases:
        if lease is not target[0]:
            hung.work.execute_step(lease)


def check_history_invariants(history: list[EventEnvelope]) -> None:
    """Gapless sequences from 1, ``run_started`` first, at most one terminal event and it is
    last, never two ``step_completed`` for one step."""
    assert [e.sequence for e in history] == list(range(1, len(history) + 1))
    assert history[0].event.event_key() == "run_started"
    assert all(e.event.event_key() != "run_started" for e in history[1:])
    terminal = [i for i, e in enumerate(history) if e.event.event_key() in TERMINAL_KEYS]
    assert len(terminal) <= 1
    if terminal:
        assert terminal[0] == len(history) - 1
    completed = [e.event.step_id for e in history if e.event.event_key() == "step_completed"]
    assert len(completed) == len(set(completed))


# -- determinism: build "det-1", code A and changed copies ---------------------------------------

DET_BUILD = "det-1"


@dataclass(frozen=True)
class Variant:
    """The parameters each determinism workflow issues; the defaults are "code A"."""

    step_id: str = "s"
    step_name: str = "charge"
    step_input: Any = field(default_factory=lambda: {"amount": 10})
    retry: RetryPolicy = field(default_factory=lambda: RetryPolicy(max_attempts=3))
    wait_seconds: float = 3600.0
    token_name: str = "approval"
    hook_metadata: Any = field(default_factory=lambda: {"who": "ops"})
    signal_name: str = "approve"
    child_workflow: str = "det-child-target"
    child_input: Any = field(default_factory=lambda: {"n": 1})
    cancellation: str = "cancel"
    cont_input: Any = field(default_factory=lambda: {"gen": 1})
    cont_build: str | None = None
    cont_patches: tuple[str, ...] | None = None
    batch_b_input: Any = field(default_factory=lambda: {"n": 2})
    batch_extra: bool = False
    raise_error: str | None = None


def determinism_runtime(
    patches: Iterable[str] = (), build_id: str = DET_BUILD, **changes: Any
) -> Runtime:
    """Build ``det-1``: code A, or code A with the fields in ``changes`` changed."""
    v = replace(Variant(), **changes)
    rt = Runtime(build_id=build_id, patches=patches)

    @rt.workflow("det-step")
    def det_step(ctx):
        if (out := ctx.step_output(v.step_id)) is not None:
            return ctx.complete(out)
        return ctx.schedule_step(v.step_id, v.step_name, v.step_input, retry=v.retry)

    @rt.workflow("det-wait")
    def det_wait(ctx):
        if ctx.wait_done("w"):
            return ctx.complete("woke")
        return ctx.wait_until("w", ctx.started_at + timedelta(seconds=v.wait_seconds))

    @rt.workflow("det-hook")
    def det_hook(ctx):
        if ctx.hook_resolved("h"):
            return ctx.complete(ctx.hook("h"))
        return ctx.create_hook("h", ctx.new_token(v.token_name), v.hook_metadata)

    @rt.workflow("det-signal")
    def det_signal(ctx):
        if ctx.wait_done("sw"):
            return ctx.complete(ctx.signal("sw"))
        return ctx.wait_for_signal("sw", v.signal_name)

    @rt.workflow("det-child")
    def det_child(ctx):
        if (outcome := ctx.child_outcome("c")) is not None:
            return ctx.complete(outcome.result)
        return ctx.start_child("c", v.child_workflow, v.child_input, v.cancellation)

    @rt.workflow("det-child-target")
    def det_child_target(ctx):
        payload = ctx.receive("go", "finish")
        return ctx.complete({"input": ctx.input, "payload": payload})

    @rt.workflow("det-child-target-v2")
    def det_child_target_v2(ctx):
        return ctx.complete("v2")

    @rt.workflow("det-continue")
    def det_continue(ctx):
        if ctx.input is not None and ctx.input.get("gen", 0) >= 1:
            return ctx.complete(ctx.input)
        return ctx.continue_as_new(
            v.cont_input, runtime_build_id=v.cont_build, patches=v.cont_patches
        )

    @rt.workflow("det-batch")
    def det_batch(ctx):
        members = [
            ctx.schedule_step("a", "charge", {"n": 1}),
            ctx.schedule_step("b", "charge", v.batch_b_input),
        ]
        if v.batch_extra:
            members.append(ctx.schedule_step("c", "charge", {"n": 3}))
        if all(ctx.step_state(m.step_id) is StepStatus.COMPLETED for m in members):
            return ctx.complete([ctx.step_output(m.step_id) for m in members])
        return ctx.schedule_steps(members, batch_id="pay")

    @rt.workflow("det-raise")
    def det_raise(ctx):
        if v.raise_error is not None:
            raise ValueError(v.raise_error)
        return ctx.complete("fixed")

    @rt.step("charge")
    def charge(input, info):
        return {"charged": input}

    @rt.step("charge-v2")
    def charge_v2(input, info):
        return {"charged-v2": input}

    return rt


# -- scenario workflows (build "scn-1") ------------------------------------------------------------

SCN_BUILD = "scn-1"


class StepLog:
    """Counts handler calls per (run_id, step_id, attempt)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []


def scenario_runtime(
    log: StepLog | None = None,
    *,
    build_id: str = SCN_BUILD,
    patches: Iterable[str] = (),
    fail_times: dict[str, int] | None = None,
) -> Runtime:
    """Workflows for retries, timers, signals, hooks, children, continuation and cancellation.

    ``fail_times[step_name]``: how many first attempts of steps with that name raise.
    """
    log = log or StepLog()
    fail_times = dict(fail_times or {})
    rt = Runtime(build_id=build_id, patches=patches)

    # -- steps --
    @rt.step("ok")
    def ok(input, info):
        log.calls.append((info.run_id, info.step_id, info.attempt))
        return {"ok": input, "attempt": info.attempt}

    @rt.step("boom")
    def boom(input, info):
        log.calls.append((info.run_id, info.step_id, info.attempt))
        raise RuntimeError(f"boom on attempt {info.attempt}")

    @rt.step("bad-input")
    def bad_input(input, info):
        log.calls.append((info.run_id, info.step_id, info.attempt))
        raise ValueError("the input can never work")

    @rt.step("flaky")
    def flaky(input, info):
        log.calls.append((info.run_id, info.step_id, info.attempt))
        if info.attempt <= fail_times.get("flaky", 1):
            raise ConnectionError(f"flaky attempt {info.attempt}")
        return {"flaky": input, "attempt": info.attempt}

    # -- retries (rule 4) --
    @rt.workflow("batch-terminate")
    def batch_terminate(ctx):
        retry = RetryPolicy(max_attempts=3, initial_interval=1.0, backoff_coefficient=2.0)
        members = [
            ctx.schedule_step("a", "boom", {"n": 1}, retry=retry),
            ctx.schedule_step("b", "ok", {"n": 2}),
            ctx.schedule_step("c", "ok", {"n": 3}),
        ]
        if all(ctx.step_state(m.step_id) is StepStatus.COMPLETED for m in members):
            return ctx.complete("unreachable")
        return ctx.schedule_steps(members, batch_id="trio")

    @rt.workflow("retry-once")
    def retry_once(ctx):
        retry = RetryPolicy(
            max_attempts=ctx.input["max_attempts"],
            initial_interval=2.0,
            backoff_coefficient=3.0,
            non_retryable=ctx.input.get("non_retryable", ()),
        )
        out = ctx.step("s", ctx.input["handler"], {"x": 1}, retry=retry)
        return ctx.complete(out)

    @rt.workflow("surface")
    def surface(ctx):
        retry = RetryPolicy(max_attempts=2, initial_interval=1.0, on_exhausted="surface")
        if (error := ctx.step_error("s")) is not None and ctx.input.get("handle", True):
            return ctx.complete({"handled": error})
        if (out := ctx.step_output("s")) is not None:
            return ctx.complete(out)
        return ctx.schedule_step("s", "boom", {"x": 1}, retry=retry)

    @rt.workflow("surface-seq")
    def surface_seq(ctx):
        retry = RetryPolicy(max_attempts=1, on_exhausted="surface")
        try:
            ctx.step("s", "boom", None, retry=retry)
        except StepFailedError as exc:
            return ctx.complete({"caught": exc.error})
        return ctx.complete("unreachable")

    @rt.workflow("complete-early")
    def complete_early(ctx):
        # Completes as soon as "fast" is done, leaving "slow" unsettled (rule 4 closes it).
        if ctx.step_output("fast") is not None:
            return ctx.complete("done early")
        return ctx.schedule_steps(
            [ctx.schedule_step("fast", "ok", 1), ctx.schedule_step("slow", "ok", 2)]
        )

    # -- timers --
    @rt.workflow("timer")
    def timer(ctx):
        ctx.sleep("nap", ctx.input["seconds"])
        return ctx.complete("woke")

    # -- signals --
    @rt.workflow("one-signal")
    def one_signal(ctx):
        return ctx.complete(ctx.receive("sw", "approve"))

    @rt.workflow("two-signals")
    def two_signals(ctx):
        first = ctx.receive("first", "item")
        second = ctx.receive("second", "item")
        return ctx.complete([first, second])

    # -- hooks --
    @rt.workflow("hook")
    def hook(ctx):
        if ctx.hook_resolved("h"):
            return ctx.complete(ctx.hook("h"))
        return ctx.create_hook("h", ctx.new_token("approval"), {"kind": "approval"})

    @rt.workflow("fixed-token-hook")
    def fixed_token_hook(ctx):
        # A literal token (not ctx.new_token): two runs of this workflow collide.
        if ctx.hook_resolved("h"):
            return ctx.complete(ctx.hook("h"))
        return ctx.create_hook("h", ctx.input["token"], None)

    # -- children --
    @rt.workflow("parent")
    def parent(ctx):
        policy = ctx.input.get("cancellation", "cancel")
        outcome = ctx.child("c", ctx.input["child"], ctx.input.get("child_input"), policy)
        if ctx.child_result("c") is not None:
            return ctx.complete({"child_result": ctx.child_result("c")})
        return ctx.complete({"child_outcome": outcome.to_json()})

    @rt.workflow("child-ok")
    def child_ok(ctx):
        out = ctx.step("work", "ok", ctx.input)
        return ctx.complete(out)

    @rt.workflow("child-fail")
    def child_fail(ctx):
        return ctx.fail({"type": "ChildError", "message": "child gave up"})

    @rt.workflow("child-waits")
    def child_waits(ctx):
        return ctx.complete(ctx.receive("go", "finish"))

    @rt.workflow("child-continues")
    def child_continues(ctx):
        # Continues as new once, then waits for "finish" in its successor.
        if ctx.input is None:
            return ctx.continue_as_new({"generation": 1})
        return ctx.complete({"finished": ctx.receive("go", "finish")})

    # -- continue_as_new --
    @rt.workflow("counter")
    def counter(ctx):
        n = ctx.input["n"]
        if n < ctx.input["until"]:
            return ctx.continue_as_new({"n": n + 1, "until": ctx.input["until"]})
        # ctx.patched names only markers its build declares (an undeclared one is an error).
        return ctx.complete({"n": n, "patched": "p1" in rt.patches and ctx.patched("p1")})

    # -- cancellation --
    @rt.workflow("cancel-plain")
    def cancel_plain(ctx):
        return ctx.complete(ctx.receive("sw", "never"))

    @rt.workflow("cancel-cleanup")
    def cancel_cleanup(ctx):
        if ctx.cancel_requested:
            ctx.step("cleanup", "ok", {"undo": ctx.input})
            return ctx.cancelled("cleaned up")
        return ctx.complete(ctx.receive("sw", "never"))

    # -- versioning --
    @rt.workflow("which-build")
    def which_build(ctx):
        return ctx.complete({"build": build_id, "fix": "fix" in rt.patches and ctx.patched("fix")})

    return rt


# -- random programs (property tests) --------------------------------------------------------------

PROGRAM_BUILD = "prop-1"


def program_runtime(build_id: str = PROGRAM_BUILD) -> Runtime:
    """``program``: a workflow that interprets its input, a list of operations.

    ``["step", handler]``, ``["batch", [handler, ...]]``, ``["wait", seconds]``,
    ``["signal", name]``, ``["hook"]``, ``["child", policy, [op, ...]]``, ``["continue"]``,
    ``["fail"]``, ``["first", seconds]`` (signal ``a``, signal ``b`` or a timer, whichever comes
    first), ``["updates"]`` (the answers of the ``note`` updates so far); handlers are ``ok``,
    ``fail`` and ``flaky`` (fails its first attempt).
    Under cancellation it runs a ``cleanup`` step first when ``input["cleanup"]`` is true.
    """
    rt = Runtime(build_id=build_id)
    surface = RetryPolicy(max_attempts=2, initial_interval=5.0, on_exhausted="surface")
    terminate = RetryPolicy(max_attempts=2, initial_interval=5.0)

    @rt.step("ok")
    def ok(input, info):
        return input

    @rt.step("fail")
    def fail(input, info):
        raise RuntimeError(f"failed attempt {info.attempt}")

    @rt.step("flaky")
    def flaky(input, info):
        if info.attempt == 1:
            raise ConnectionError("first attempt fails")
        return {"attempt": info.attempt}

    @rt.workflow("program")
    def program(ctx):
        if ctx.cancel_requested:
            if ctx.input.get("cleanup"):
                ctx.step("cleanup", "ok", None)
            return ctx.cancelled()
        results: list[Any] = []
        for i, op in enumerate(ctx.input["ops"]):
            oid = f"op{i}"
            kind = op[0]
            if kind == "step":
                try:
                    results.append(ctx.step(oid, op[1], {"i": i}, retry=surface))
                except StepFailedError:
                    results.append("failed")
            elif kind == "batch":
                members = [
                    ctx.schedule_step(f"{oid}.{j}", name, {"j": j}, retry=terminate)
                    for j, name in enumerate(op[1])
                ]
                if not all(ctx.step_state(m.step_id) is StepStatus.COMPLETED for m in members):
                    return ctx.schedule_steps(members)
                results.append(len(members))
            elif kind == "wait":
                ctx.sleep(oid, op[1])
                results.append("woke")
            elif kind == "signal":
                results.append(ctx.receive(oid, op[1]))
            elif kind == "hook":
                if not ctx.hook_resolved(oid):
                    return ctx.create_hook(oid, ctx.new_token(oid), {"i": i})
                results.append(ctx.hook(oid))
            elif kind == "child":
                outcome = ctx.child(oid, "program", {"ops": op[2]}, op[1])
                results.append(outcome.kind.value)
            elif kind == "continue":
                if ctx.input.get("gen", 0) < 1:
                    return ctx.continue_as_new({**ctx.input, "gen": 1})
            elif kind == "fail":
                return ctx.fail({"at": i})
            elif kind == "first":
                which, _ = ctx.first(
                    ctx.on_signal(f"{oid}.a", "a"),
                    ctx.on_signal(f"{oid}.b", "b"),
                    ctx.on_timer(f"{oid}.t", timeout=op[1]),
                )
                results.append(which)
            elif kind == "updates":
                results.append([u.result for u in ctx.updates("note")])
        return ctx.complete(results)

    @rt.update("program", "note")
    def note(ctx, args):
        return {"n": len(ctx.updates("note")) + 1, "args": args}

    return rt
