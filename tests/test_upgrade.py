"""``flow_cli.ops.upgrade``: open runs re-pinned to another build once they replay there.

Four builds of one ``pay`` workflow (quote → wait for signal ``go`` → charge):
``pay-1``; ``pay-2`` charges in cents behind the patch marker ``cents`` (runs of ``pay-1`` do not
carry it, so they replay unchanged); ``pay-3`` charges in cents unguarded (only runs that have not
scheduled ``charge`` yet replay on it); ``pay-4`` lost the ``charge`` handler. Each build's
``charge`` handler says which build ran it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

import pytest
from engine_workflows import keys, make_engine

from flow_cli import Runtime, RuntimeCommand, WorkflowContext
from flow_cli.engine.engine import Engine
from flow_cli.engine.replay_check import replay_history
from flow_cli.errors import BuildNotHosted, InputError, RunNotFound, StoreError
from flow_cli.model.clock import ManualClock
from flow_cli.model.events import BuildUpgraded, EventEnvelope, SignalReceived, event_from_data
from flow_cli.model.snapshot import project
from flow_cli.model.status import RunStatus
from flow_cli.ops.fork import fork_run
from flow_cli.ops.upgrade import MAX_CHECKS, upgrade_runs
from flow_cli.store.protocol import EventStore, NewRun, RunFilter, StreamWrite


def _build(build_id: str, amount: Callable[[WorkflowContext, int], int], **kw: Any) -> Runtime:
    runtime = Runtime(build_id=build_id, **kw)

    @runtime.workflow("pay")
    def pay(ctx: WorkflowContext) -> RuntimeCommand:
        quote = ctx.step("quote", "quote", {"n": ctx.input["n"]})
        if ctx.input.get("boom") and build_id == "pay-1":
            raise RuntimeError("pay-1 cannot read this quote")
        ctx.receive("go", "go")
        charged = ctx.step("charge", "charge", {"amount": amount(ctx, quote["amount"])})
        return ctx.complete(charged)

    @runtime.workflow("loop")
    def loop(ctx: WorkflowContext) -> RuntimeCommand:
        ctx.receive("next", "next")
        if ctx.input["round"] >= 1:
            kid = ctx.child("kid", "kid", {})
            return ctx.complete({"kid": kid is not None})
        return ctx.continue_as_new({"round": ctx.input["round"] + 1})

    @runtime.workflow("kid")
    def kid(ctx: WorkflowContext) -> RuntimeCommand:
        return ctx.complete({"build": "any"})

    @runtime.step("quote")
    def quote_step(input: dict[str, Any], info: Any) -> dict[str, Any]:
        return {"amount": input["n"]}

    if build_id != "pay-4":

        @runtime.step("charge")
        def charge(input: dict[str, Any], info: Any) -> dict[str, Any]:
            return {"charged": input["amount"], "by": build_id}

    return runtime


V1 = _build("pay-1", lambda ctx, a: a)
V2 = _build("pay-2", lambda ctx, a: a * 100 if ctx.patched("cents") else a, patches=["cents"])
V3 = _build("pay-3", lambda ctx, a: a * 100)
V4 = _build("pay-4", lambda ctx, a: a)
ALL = (V1, V2, V3, V4)


@pytest.fixture
def engine(store: EventStore, clock: ManualClock) -> Engine:
    return make_engine(store, ALL, clock)


def _setup(engine: Engine, clock: ManualClock) -> None:
    # "fresh" stays as created, before any decision: its starter leaves them to the workers.
    v1_only = make_engine(engine.store, [V1], clock, name="v1-worker", eager_start=False)
    for run_id in ("waiting", "charging", "done"):
        v1_only.start("pay", {"n": 2}, run_id=run_id, build_id="pay-1")
    v1_only.tick(until_idle=True)
    v1_only.signal("done", "go")
    v1_only.tick(until_idle=True)
    v1_only.signal("charging", "go")
    v1_only.decide("charging")  # charge is scheduled; no step is run
    v1_only.start("pay", {"n": 2}, run_id="fresh", build_id="pay-1")


def _last(engine: Engine, run_id: str) -> EventEnvelope:
    return engine.history(run_id)[-1]


def _finish(engine: Engine, clock: ManualClock, build: Runtime, run_ids: Sequence[str]) -> None:
    """Drive ``run_ids`` to their end with workers that host ``build`` only."""
    worker = make_engine(engine.store, [build], clock, name=f"{build.build_id}-worker")
    worker.tick(until_idle=True)
    for run_id in run_ids:
        if "go" not in [s.signal_name for s in worker.snapshot(run_id).signals]:
            worker.signal(run_id, "go")
    worker.tick(until_idle=True)


# -- the event and the projection ---------------------------------------------------------------


def test_build_upgraded_is_stored_as_from_and_to() -> None:
    event = BuildUpgraded(from_build="a", to_build="b")
    assert event.event_key() == "build_upgraded"
    assert event.to_data() == {"from": "a", "to": "b"}
    assert event_from_data("build_upgraded", {"from": "a", "to": "b"}) == event


def test_the_snapshot_is_pinned_to_the_new_build_and_keeps_the_recorded_spec(
    engine: Engine, clock: ManualClock
) -> None:
    _setup(engine, clock)
    upgrade_runs(engine, "pay-1", "pay-2", run_ids=["waiting"])
    history = engine.history("waiting")
    assert history[0].event.spec.runtime_build_id == "pay-1"  # type: ignore[union-attr]
    snap = project(history)
    assert (snap.spec.runtime_build_id, snap.spec.patches) == ("pay-2", ())
    assert [(u.from_build, u.to_build) for u in snap.build_upgrades] == [("pay-1", "pay-2")]
    shown = snap.to_json()
    assert shown["build_id"] == "pay-2"
    assert shown["build_upgrades"][0]["sequence"] == history[-1].sequence
    copy = snap.copy()
    assert (
        copy.build_upgrades == snap.build_upgrades
        and copy.build_upgrades is not snap.build_upgrades
    )


def test_an_upgrade_from_another_build_than_the_pinned_one_is_a_malformed_history(
    engine: Engine, clock: ManualClock
) -> None:
    _setup(engine, clock)
    history = engine.history("waiting")
    bad = EventEnvelope(
        run_id="waiting",
        sequence=len(history) + 1,
        recorded_at=clock.now(),
        event=BuildUpgraded(from_build="pay-9", to_build="pay-2"),
    )
    with pytest.raises(ValueError, match="pinned to 'pay-1'"):
        project([*history, bad])


# -- what is upgraded and what is refused -------------------------------------------------------


def test_a_patch_guarded_change_upgrades_every_open_run(engine: Engine, clock: ManualClock) -> None:
    _setup(engine, clock)
    done_before = engine.history("done")
    report = upgrade_runs(engine, "pay-1", "pay-2")
    assert sorted(report.upgraded) == ["charging", "fresh", "waiting"]
    assert report.refused == () and report.ok
    for run_id in report.upgraded:
        last = _last(engine, run_id)
        assert last.event == BuildUpgraded(from_build="pay-1", to_build="pay-2")
        assert engine.get_run(run_id).build_id == "pay-2"
        assert engine.snapshot(run_id).spec.patches == ()  # runs keep their patch markers
    assert engine.history("done") == done_before  # ended runs are never touched
    assert engine.get_run("done").build_id == "pay-1"
    assert report.to_json()["upgraded"] == list(report.upgraded)

    # Only workers of pay-2 take the runs now, and they finish them under pay-2's code.
    v1_only = make_engine(engine.store, [V1], clock, name="v1-late")
    assert v1_only.tick(until_idle=True).idle
    _finish(engine, clock, V2, report.upgraded)
    for run_id in report.upgraded:
        outcome = engine.snapshot(run_id).outcome
        assert outcome is not None and outcome.kind is RunStatus.COMPLETED
        # No patch marker on these runs: pay-2 keeps the old amount, and its handler ran it.
        assert outcome.result == {"charged": 2, "by": "pay-2"}


def test_an_unguarded_change_upgrades_only_runs_before_the_changed_point(
    engine: Engine, clock: ManualClock
) -> None:
    _setup(engine, clock)
    before = engine.history("charging")
    report = upgrade_runs(engine, "pay-1", "pay-3")
    assert sorted(report.upgraded) == ["fresh", "waiting"]
    [refusal] = report.refused
    assert refusal.run_id == "charging"
    [d] = refusal.divergences
    assert (d.identity, d.field, d.recorded, d.produced) == (
        "step 'charge'",
        "input",
        {"amount": 2},
        {"amount": 200},
    )
    assert "step 'charge' input" in refusal.reason
    assert engine.history("charging") == before
    assert engine.get_run("charging").build_id == "pay-1"
    assert report.to_json()["refused"][0]["divergences"][0]["field"] == "input"

    # A run upgraded mid-flight completes under pay-3's code: it charges in cents.
    _finish(engine, clock, V3, ["waiting", "fresh"])
    for run_id in ("waiting", "fresh"):
        outcome = engine.snapshot(run_id).outcome
        assert outcome is not None and outcome.result == {"charged": 200, "by": "pay-3"}


def test_dry_run_checks_every_run_and_changes_nothing(engine: Engine, clock: ManualClock) -> None:
    _setup(engine, clock)
    before = {r: engine.history(r) for r in ("fresh", "waiting", "charging", "done")}
    report = upgrade_runs(engine, "pay-1", "pay-3", dry_run=True)
    assert report.dry_run and sorted(report.upgraded) == ["fresh", "waiting"]
    assert [r.run_id for r in report.refused] == ["charging"]
    assert {r: engine.history(r) for r in before} == before
    assert {engine.get_run(r).build_id for r in before} == {"pay-1"}


def test_filters_and_named_runs(engine: Engine, clock: ManualClock) -> None:
    _setup(engine, clock)
    only = upgrade_runs(
        engine, "pay-1", "pay-2", where=RunFilter(statuses=(RunStatus.PENDING, RunStatus.COMPLETED))
    )
    assert only.upgraded == ("fresh",)  # Completed is never selected
    named = upgrade_runs(engine, "pay-1", "pay-2", run_ids=["done", "fresh", "waiting"])
    assert named.upgraded == ("waiting",)
    assert [(s.run_id, s.reason) for s in named.skipped] == [
        ("done", "it has ended (Completed); not touched"),
        ("fresh", "it is pinned to build 'pay-2', not 'pay-1'"),
    ]
    assert upgrade_runs(engine, "pay-1", "pay-2", where=RunFilter(workflow="loop")).upgraded == ()


def test_a_database_failure_midway_names_the_runs_already_moved(
    engine: Engine, clock: ManualClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    _setup(engine, clock)
    commit = engine.streams.commit
    calls: list[int] = []

    def fail_the_second(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 2:
            raise StoreError("Flow database flow.db is locked by another connection.")
        return commit(*args, **kwargs)

    monkeypatch.setattr(engine.streams, "commit", fail_the_second)
    with pytest.raises(StoreError) as raised:
        upgrade_runs(engine, "pay-1", "pay-2", run_ids=["waiting", "fresh"])
    assert str(raised.value) == (
        "Flow database flow.db is locked by another connection — flow upgrade stopped at run "
        "fresh, after re-pinning 1 run(s) to pay-2 (waiting); run it again for the rest."
    )
    assert engine.get_run("waiting").build_id == "pay-2"
    assert engine.get_run("fresh").build_id == "pay-1"


def test_refusals_of_the_request(engine: Engine, clock: ManualClock) -> None:
    _setup(engine, clock)
    with pytest.raises(InputError, match="both 'pay-1'"):
        upgrade_runs(engine, "pay-1", "pay-1")
    with pytest.raises(BuildNotHosted):
        upgrade_runs(engine, "pay-1", "pay-9")
    with pytest.raises(RunNotFound):
        upgrade_runs(engine, "pay-1", "pay-2", run_ids=["waiting", "nope"])
    assert engine.get_run("waiting").build_id == "pay-1"  # nothing was done
    with pytest.raises(InputError, match="never upgraded"):
        upgrade_runs(engine, "pay-1", "pay-2", where=RunFilter(statuses=(RunStatus.COMPLETED,)))
    with pytest.raises(InputError, match="contradicts"):
        upgrade_runs(engine, "pay-1", "pay-2", where=RunFilter(build_id="pay-3"))


def test_the_target_must_know_the_runs_patch_markers(engine: Engine, clock: ManualClock) -> None:
    engine.start("pay", {"n": 1}, run_id="cents", build_id="pay-2")
    report = upgrade_runs(engine, "pay-2", "pay-1")
    [refusal] = report.refused
    assert [(d.identity, d.field) for d in refusal.divergences] == [("run", "patches")]


def test_an_open_step_whose_handler_the_target_lacks_is_refused(
    engine: Engine, clock: ManualClock
) -> None:
    _setup(engine, clock)
    report = upgrade_runs(engine, "pay-1", "pay-4")
    assert sorted(report.upgraded) == ["fresh", "waiting"]
    [refusal] = report.refused
    assert refusal.run_id == "charging"
    # The replay asks pay-4 to schedule charge again at its recorded decision: it cannot.
    [d] = refusal.divergences
    assert (d.identity, d.field) == ("workflow", "error")
    assert d.produced.startswith("UnknownStep: step 'charge' names handler 'charge'")


def test_a_run_stuck_on_a_failed_decision_is_upgraded_to_fixed_code(
    engine: Engine, clock: ManualClock
) -> None:
    # "fresh" stays as created, before any decision: its starter leaves them to the workers.
    v1_only = make_engine(engine.store, [V1], clock, name="v1-worker", eager_start=False)
    v1_only.start("pay", {"n": 3, "boom": True}, run_id="stuck", build_id="pay-1")
    v1_only.tick(until_idle=True)
    assert "decision_failed" in keys(engine, "stuck")
    report = upgrade_runs(engine, "pay-1", "pay-2")
    assert report.upgraded == ("stuck",)
    # Due at once: a pay-2 worker decides it now, not after the failed decision's back-off.
    assert engine.get_run("stuck").decide_at == clock.now()
    _finish(engine, clock, V2, ["stuck"])
    outcome = engine.snapshot("stuck").outcome
    assert outcome is not None and outcome.result == {"charged": 3, "by": "pay-2"}


# -- concurrency --------------------------------------------------------------------------------


class RacingStore:
    """Delegates to a store; before the first commit that carries ``build_upgraded`` for
    ``run_id``, runs ``meanwhile`` (another writer moving the run between check and append)."""

    def __init__(self, inner: EventStore, run_id: str, meanwhile: Callable[[], None]) -> None:
        self.inner = inner
        self.run_id = run_id
        self.meanwhile: Callable[[], None] | None = meanwhile
        self.upgrade_commits = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def commit(
        self, writes: Sequence[StreamWrite], creates: Sequence[NewRun], now: datetime
    ) -> Any:
        for write in writes:
            if write.run_id == self.run_id and any(
                isinstance(e, BuildUpgraded) for e in write.events
            ):
                self.upgrade_commits += 1
                if self.meanwhile is not None:
                    meanwhile, self.meanwhile = self.meanwhile, None
                    meanwhile()
        return self.inner.commit(writes, creates, now)


def test_a_run_that_moves_between_check_and_append_is_checked_again(
    engine: Engine, clock: ManualClock
) -> None:
    _setup(engine, clock)
    other = make_engine(engine.store, [V1], clock, name="v1-worker")
    racing = RacingStore(engine.store, "waiting", lambda: other.signal("waiting", "hello"))
    upgrader = Engine(racing, list(engine.runtimes.values()), clock=clock)  # type: ignore[arg-type]
    report = upgrade_runs(upgrader, "pay-1", "pay-2", run_ids=["waiting"])
    assert report.upgraded == ("waiting",) and report.rechecked == 1
    assert racing.upgrade_commits == 2
    history = engine.history("waiting")
    assert isinstance(history[-2].event, SignalReceived)  # the other writer's event is kept
    assert isinstance(history[-1].event, BuildUpgraded)


def test_a_run_that_moved_past_the_changed_point_meanwhile_is_refused_on_the_recheck(
    engine: Engine, clock: ManualClock
) -> None:
    _setup(engine, clock)
    other = make_engine(engine.store, [V1], clock, name="v1-worker")

    def go() -> None:  # the signal arrives and a pay-1 worker schedules charge
        other.signal("waiting", "go")
        other.decide("waiting")

    racing = RacingStore(engine.store, "waiting", go)
    upgrader = Engine(racing, list(engine.runtimes.values()), clock=clock)  # type: ignore[arg-type]
    report = upgrade_runs(upgrader, "pay-1", "pay-3", run_ids=["waiting"])
    assert report.upgraded == () and report.rechecked == 1
    assert [d.identity for d in report.refused[0].divergences] == ["step 'charge'"]
    assert engine.get_run("waiting").build_id == "pay-1"
    assert "build_upgraded" not in keys(engine, "waiting")


def test_a_run_that_never_stops_moving_is_refused_after_bounded_checks(
    engine: Engine, clock: ManualClock
) -> None:
    _setup(engine, clock)
    other = make_engine(engine.store, [V1], clock, name="v1-worker")

    class Busy(RacingStore):
        def commit(
            self, writes: Sequence[StreamWrite], creates: Sequence[NewRun], now: datetime
        ) -> Any:
            other.signal("waiting", "noise")
            return super().commit(writes, creates, now)

    busy = Busy(engine.store, "waiting", lambda: None)
    upgrader = Engine(busy, list(engine.runtimes.values()), clock=clock)  # type: ignore[arg-type]
    report = upgrade_runs(upgrader, "pay-1", "pay-2", run_ids=["waiting"])
    assert report.upgraded == ()
    assert "kept moving" in report.refused[0].reason
    assert busy.upgrade_commits == MAX_CHECKS and report.rechecked == MAX_CHECKS - 1


def test_a_step_that_ends_after_the_upgrade_is_decided_by_the_new_build(
    engine: Engine, clock: ManualClock
) -> None:
    _setup(engine, clock)
    # "fresh" stays as created, before any decision: its starter leaves them to the workers.
    v1_only = make_engine(engine.store, [V1], clock, name="v1-worker", eager_start=False)
    [lease] = [lease for lease in v1_only.work.lease_steps(60, 10) if lease.run_id == "charging"]
    # The upgrade lands while pay-1's worker runs the charge handler.
    outcome = v1_only.executor.execute(
        lease,
        "v1-worker",
        60,
        before_call=lambda: upgrade_runs(engine, "pay-1", "pay-2", run_ids=["charging"]),
    )
    assert outcome.state == "completed"
    history = engine.history("charging")
    assert [e.event.event_key() for e in history[-2:]] == ["build_upgraded", "step_completed"]
    assert engine.get_run("charging").decide_at == clock.now()  # pay-2's workers decide it
    make_engine(engine.store, [V1], clock, name="v1-again").tick(until_idle=True)
    assert engine.history("charging") == history  # pay-1's workers leave it alone
    _finish(engine, clock, V2, ["charging"])
    result = engine.snapshot("charging").outcome
    assert result is not None and result.result == {"charged": 2, "by": "pay-1"}
    assert "build_upgraded" in keys(engine, "charging")


# -- what inherits the build it is pinned to now ------------------------------------------------


def test_successors_children_and_forks_take_the_current_build(
    engine: Engine, clock: ManualClock
) -> None:
    engine.start("loop", {"round": 0}, run_id="loop", build_id="pay-1")
    engine.tick(until_idle=True)
    assert upgrade_runs(engine, "pay-1", "pay-2").upgraded == ("loop",)
    engine.signal("loop", "next")
    engine.tick(until_idle=True)
    ended = engine.history("loop")[-1].event
    assert ended.to_data()["runtime_build_id"] == "pay-2"  # run_continued_as_new
    assert engine.get_run("loop~1").build_id == "pay-2"
    assert engine.snapshot("loop~1").spec.patches == ()
    engine.signal("loop~1", "next")
    engine.tick(until_idle=True)
    assert engine.get_run("loop~1/kid").build_id == "pay-2"
    assert engine.snapshot("loop~1").outcome is not None

    engine.start("pay", {"n": 1}, run_id="orig", build_id="pay-1")
    engine.tick(until_idle=True)
    upgrade_runs(engine, "pay-1", "pay-2", run_ids=["orig"])
    forked = fork_run(engine, "orig", new_id="orig-fork")
    assert forked.run_id == "orig-fork"
    assert engine.get_run("orig-fork").build_id == "pay-2"
    assert "build_upgraded" not in keys(engine, "orig-fork")


# -- replay-check of an upgraded history ---------------------------------------------------------


def test_an_upgraded_history_replays_on_its_build_and_the_part_before_on_the_old_one(
    engine: Engine, clock: ManualClock
) -> None:
    _setup(engine, clock)
    upgrade_runs(engine, "pay-1", "pay-3", run_ids=["waiting"])
    _finish(engine, clock, V3, ["waiting"])
    history = engine.history("waiting")
    assert "build_upgraded" in [e.event.event_key() for e in history]
    assert replay_history(V3, history).ok
    # pay-1 made every decision before the upgrade the same way; after it, pay-3 charged in cents.
    old = replay_history(V1, history)
    upgraded_at = next(e.sequence for e in history if isinstance(e.event, BuildUpgraded))
    assert not old.ok and all(d.sequence > upgraded_at for d in old.divergences)
    assert {(d.identity, d.field) for d in old.divergences} == {("step 'charge'", "input")}
