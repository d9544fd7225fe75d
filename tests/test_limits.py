"""Flow-control limits (DESIGN §6.4), on every store: a step's concurrency and rate hold in
the lease, a step over its limit waits ready (no attempt used), a slot held by a worker that
vanished comes back when its lease lapses, and operators' overrides take effect at once."""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from limit_workflows import runtime

from flow_cli.engine.decider import StartSteps
from flow_cli.engine.engine import Engine
from flow_cli.errors import LimitInvalid
from flow_cli.model.clock import ManualClock
from flow_cli.model.limits import DeclaredLimit, Rate, parse_rate
from flow_cli.model.status import StepStatus
from flow_cli.store.protocol import EventStore


def _engine(store: EventStore, clock: ManualClock, name: str = "w1") -> Engine:
    return Engine(store, [runtime], clock=clock, worker_id=name)


def _start(engine: Engine, workflow: str, count: int) -> list[str]:
    return [engine.start(workflow, i, run_id=f"{workflow}-{i}").run_id for i in range(count)]


def test_a_step_concurrency_holds_in_the_lease_and_waits_ready(
    store: EventStore, clock: ManualClock
) -> None:
    engine = _engine(store, clock)
    runs = _start(engine, "pay", 5)
    first = engine.work.lease_steps(30, 10)
    assert len(first) == 3
    assert engine.work.lease_steps(30, 10) == []
    other = _engine(store, clock, "w2")
    assert other.work.lease_steps(30, 10) == []  # fleet-wide, not per worker
    held = {lease.run_id for lease in first}
    for run_id in set(runs) - held:
        step = engine.snapshot(run_id).steps["charge"]
        assert step.status is StepStatus.SCHEDULED and step.attempts == 0  # no attempt used
    state = {s.target: s for s in engine.limits.list()}["step:charge"]
    assert (state.concurrency, state.in_use, state.waiting, state.source) == (3, 3, 2, "code")
    # One attempt ends: one slot frees, and one waiting attempt is leased.
    engine.work.execute_step(first[0], 30)
    assert len(other.work.lease_steps(30, 10)) == 1


def test_limited_attempts_are_taken_by_their_runs_priority_then_age(
    store: EventStore, clock: ManualClock
) -> None:
    engine = _engine(store, clock)
    _start(engine, "pay", 3)
    engine.work.lease_steps(30, 10)  # the limit's three slots are taken
    engine.start("pay", 3, run_id="pay-late")
    engine.start("pay", 4, run_id="pay-urgent", priority=1)
    assert engine.work.lease_steps(30, 10) == []
    clock.advance(31)  # five attempts ready; by age alone the urgent one would come second
    (first,) = engine.work.lease_steps(30, 1)
    assert first.run_id == "pay-urgent"
    # Then by age: the late one (ready since its start), then the lapsed (ready since then).
    assert [lease.run_id for lease in engine.work.lease_steps(30, 10)] == ["pay-late", "pay-0"]


def test_a_slot_held_by_a_vanished_worker_comes_back_when_its_lease_lapses(
    store: EventStore, clock: ManualClock
) -> None:
    engine = _engine(store, clock)
    _start(engine, "pay", 4)
    assert len(engine.work.lease_steps(30, 10)) == 3  # w1 then vanishes with them
    other = _engine(store, clock, "w2")
    clock.advance(29)
    assert other.work.lease_steps(30, 10) == []
    clock.advance(2)  # the leases lapsed: their slots are free again
    assert len(other.work.lease_steps(30, 10)) == 3


def test_a_step_rate_holds_per_window(store: EventStore, clock: ManualClock) -> None:
    engine = _engine(store, clock)
    _start(engine, "poll", 25)
    leased = engine.work.lease_steps(30, 100)
    assert len(leased) == 20
    for lease in leased:
        engine.work.execute_step(lease, 30)
    clock.advance(0.9)
    assert engine.work.lease_steps(30, 100) == []  # ended attempts still count for the rate
    clock.advance(0.2)
    assert len(engine.work.lease_steps(30, 100)) == 5


def test_an_unlimited_step_is_not_held(store: EventStore, clock: ManualClock) -> None:
    engine = _engine(store, clock)
    _start(engine, "simple", 6)
    assert len(engine.work.lease_steps(30, 10)) == 6


def test_overrides_take_effect_fleet_wide_at_once_and_unset_restores_the_code(
    store: EventStore, clock: ManualClock
) -> None:
    engine = _engine(store, clock)
    engine.limits.declare()
    engine.limits.set("step:charge", concurrency=1)
    engine.limits.set("step:plain", rate="2/1h")
    states = {s.target: s.to_json() for s in engine.limits.list()}
    assert states["step:charge"] == {
        "target": "step:charge",
        "concurrency": 1,
        "rate": None,
        "in_use": 0,
        "waiting": 0,
        "source": "override",
    }
    assert states["step:plain"]["rate"] == "2/1h"
    _start(engine, "pay", 3)
    _start(engine, "simple", 3)
    leased = engine.work.lease_steps(30, 10)
    assert sorted(lease.step_id for lease in leased) == ["charge", "plain", "plain"]
    engine.limits.unset("step:charge")
    assert {s.target: s.source for s in engine.limits.list()}["step:charge"] == "code"
    assert len(engine.work.lease_steps(30, 10)) == 2  # concurrency 3 again


def test_a_redeclared_code_limit_keeps_the_override(store: EventStore) -> None:
    store.declare_limits([DeclaredLimit(target="step:x", concurrency=5)])
    assert store.override_limit("step:x", 2, None)
    store.declare_limits([DeclaredLimit(target="step:x", concurrency=7)])
    (state,) = store.limit_states(ManualClock().now())
    assert (state.concurrency, state.source) == (2, "override")
    assert store.clear_override("step:x")
    (state,) = store.limit_states(ManualClock().now())
    assert (state.concurrency, state.source) == (7, "code")
    assert store.limited_targets() == frozenset({"step:x"})
    assert not store.override_limit("step:nobody", 1, None)
    assert not store.clear_override("workflow:nobody")
    assert store.known_limit("step:x") and not store.known_limit("step:y")


@pytest.mark.parametrize(
    ("text", "rate"),
    [
        ("20/1s", Rate(20, 1)),
        ("100/1m", Rate(100, 60)),
        ("1000/1h", Rate(1000, 3600)),
        ("5/m", Rate(5, 60)),
        ("3/10s", Rate(3, 10)),
    ],
)
def test_rates_parse(text: str, rate: Rate) -> None:
    assert parse_rate(text) == rate


@pytest.mark.parametrize("text", ["", "20", "20/1d", "0/1s", "x/1s", "20/0s", "-1/1s"])
def test_a_bad_rate_says_what_is_right(text: str) -> None:
    with pytest.raises(LimitInvalid, match=r"e\.g\. --rate 100/1m"):
        parse_rate(text)


def test_bad_overrides_write_nothing(clock: ManualClock) -> None:
    from flow_cli.store.memory import MemoryStore

    store = MemoryStore()
    engine = _engine(store, clock)
    engine.limits.declare()
    for target, kwargs in [
        ("charge", {"concurrency": 2}),
        ("step:nobody", {"concurrency": 2}),
        ("queue:charge", {"concurrency": 2}),
        ("step:charge", {"concurrency": 0}),
        ("step:charge", {"rate": "fast"}),
        ("step:charge", {}),
        ("workflow:pay", {"rate": "1/1s"}),
    ]:
        with pytest.raises(LimitInvalid):
            engine.limits.set(target, **kwargs)  # type: ignore[arg-type]
    assert [(s.target, s.concurrency, s.source) for s in engine.limits.list()] == [
        ("step:charge", 3, "code"),
        ("step:ping", None, "code"),
        ("step:solo", 1, "code"),
        ("workflow:batch", 2, "code"),
        ("workflow:sync", 1, "code"),
    ]


def _statuses(engine: Engine, run_ids: list[str]) -> list[str]:
    return [engine.get_run(run_id).status.value for run_id in run_ids]


def test_a_keyed_run_limit_of_1_runs_each_customers_runs_one_at_a_time_in_start_order(
    store: EventStore, clock: ManualClock
) -> None:
    engine = _engine(store, clock)
    order = ["a", "b", "a", "c", "a", "b"]
    run_ids = []
    for i, customer in enumerate(order):
        run_ids.append(engine.start("sync", {"customer": customer}, run_id=f"s{i}").run_id)
        clock.advance(1)
    assert _statuses(engine, run_ids) == ["Pending"] * 6  # not decided at start: admitted later
    rounds = []
    while True:
        engine.tick(until_idle=True)
        statuses = zip(run_ids, _statuses(engine, run_ids), strict=True)
        in_progress = [run_id for run_id, status in statuses if status == "Suspended"]
        if not in_progress:
            break
        rounds.append(in_progress)
        state = {s.target: s for s in engine.limits.list()}["workflow:sync"]
        assert state.in_use == len(in_progress)
        for run_id in in_progress:  # their ends free the slots
            engine.signal(run_id, "done", run_id)
    # One run per customer at a time, in start order; the other customers proceed meanwhile.
    assert rounds == [["s0", "s1", "s3"], ["s2", "s5"], ["s4"]]
    assert _statuses(engine, run_ids) == ["Completed"] * 6


def test_an_unkeyed_run_limit_admits_that_many_runs_and_waiting_counts(
    store: EventStore, clock: ManualClock
) -> None:
    engine = _engine(store, clock)
    run_ids = [engine.start("batch", i, run_id=f"b{i}").run_id for i in range(5)]
    engine.tick(until_idle=True)
    assert _statuses(engine, run_ids) == ["Suspended"] * 2 + ["Pending"] * 3
    engine.signal("b0", "done", 1)  # an end frees a slot
    engine.tick(until_idle=True)
    assert _statuses(engine, run_ids) == ["Completed"] + ["Suspended"] * 2 + ["Pending"] * 2
    state = {s.target: s for s in engine.limits.list()}["workflow:batch"]
    assert (state.in_use, state.waiting) == (2, 2)
    engine.limits.set("workflow:batch", concurrency=3)  # at once
    engine.tick(until_idle=True)
    assert _statuses(engine, run_ids) == ["Completed"] + ["Suspended"] * 3 + ["Pending"]


def test_a_run_started_after_a_lease_found_no_limited_run_waiting_is_admitted(
    store: EventStore, clock: ManualClock
) -> None:
    # A lease that finds no run of a limited workflow waiting skips the limited lease until one
    # is Pending again (it asks first, without a lock): the next start must not be missed.
    engine = _engine(store, clock)
    other = _engine(store, clock, "w2")
    assert engine.work.lease_runs(30, 10) == []
    assert other.work.lease_runs(30, 10) == []
    engine.start("batch", 0, run_id="b0")
    assert other.work.lease_runs(30, 10) == ["b0"]  # another worker's start, no notification
    assert engine.work.lease_runs(30, 10) == []
    engine.start("batch", 1, run_id="b1")
    engine.start("batch", 2, run_id="b2")
    assert engine.work.lease_runs(30, 10) == ["b1"]  # the limit (2) has one slot left
    assert engine.work.lease_runs(30, 10) == []  # b2 waits for a slot
    clock.advance(31)  # the leases lapse: b0 and b1 are leased again, b2 still waits
    assert sorted(other.work.lease_runs(30, 10)) == ["b0", "b1"]


def test_doctor_says_throttled_for_runs_and_steps_a_limit_holds_back(
    store: EventStore, clock: ManualClock
) -> None:
    from flow_cli.ops.doctor import diagnose
    from flow_cli.store.protocol import RunFilter, WorkerInfo

    engine = _engine(store, clock)
    for i in range(2):
        engine.start("batch", i, run_id=f"b{i}")
    engine.start("batch", 9, run_id="b9")
    _start(engine, "pay", 4)
    engine.tick()  # admits two batch runs, starts three charges
    clock.advance(20)  # due for a while: without the limit these would be runnable
    now = clock.now()
    store.register_worker(
        WorkerInfo(
            worker_id="w1",
            host="h",
            pid=1,
            builds=("limits-1",),
            started_at=now,
            heartbeat_at=now,
            heartbeat_seconds=10,
        )
    )
    causes = {
        d.run_id: (d.cause, d.detail)
        for d in diagnose(engine, RunFilter(), clock.now(), limited=engine.limits.targets()).runs
    }
    assert causes["b9"] == ("throttled", "waits for a slot of workflow:batch (`flow limits`)")
    held = [run_id for run_id, (cause, _) in causes.items() if run_id.startswith("pay")]
    throttled = [r for r in held if causes[r][0] == "throttled"]
    assert len(throttled) == 1
    assert (
        causes[throttled[0]][1] == "step 'charge' waits for a slot of step:charge (`flow limits`)"
    )
    report = diagnose(engine, RunFilter(), clock.now(), limited=engine.limits.targets())
    assert not any(d.stuck for d in report.runs if d.cause == "throttled")


def test_a_bad_declaration_fails_at_import_with_what_is_right() -> None:
    from flow_cli.errors import ConfigError
    from flow_cli.runtime import Runtime

    bad = Runtime(build_id="bad-1")
    with pytest.raises(LimitInvalid, match=r"rate '100 per minute' does not parse; e\.g\."):
        bad.step("a", rate="100 per minute")
    with pytest.raises(LimitInvalid, match="at least 1"):
        bad.step("b", concurrency=0)
    with pytest.raises(LimitInvalid, match="at least 1"):
        bad.workflow("c", concurrency=-1)
    with pytest.raises(ConfigError, match="concurrency_key needs a concurrency"):
        bad.workflow("d", concurrency_key="customer")


def test_a_limited_step_is_never_started_in_the_commit_that_schedules_it(
    store: EventStore, clock: ManualClock
) -> None:
    from flow_cli.store.protocol import LimitedStarts

    if isinstance(store, LimitedStarts):
        pytest.skip("its commits count a start under the limit (the tests on_postgres_ below)")
    engine = Engine(store, [runtime], clock=clock, worker_id="w1", eager_start=False)
    engine.limits.declare()
    _start(engine, "pay", 2)
    _start(engine, "simple", 2)
    start = StartSteps("w1", 30, 10)
    report = engine.decider.decide_many(["pay-0", "pay-1", "simple-0", "simple-1"], start=start)
    # The unlimited steps start in the decisions' own commit; the limited ones wait for a
    # lease that counts them.
    assert sorted(lease.run_id for lease in report.started) == ["simple-0", "simple-1"]
    assert all(engine.snapshot(f"pay-{i}").steps["charge"].attempts == 0 for i in range(2))


def test_a_pause_holds_limited_steps_and_limited_runs_too(
    store: EventStore, clock: ManualClock
) -> None:
    from flow_cli.store.pauses import PauseKind, PauseTarget

    engine = _engine(store, clock)
    _start(engine, "pay", 2)  # their steps wait ready under the step's limit
    engine.start("sync", {"customer": "a"}, run_id="sync-a")  # waits for a slot of its workflow
    engine.pause([PauseTarget(kind=PauseKind.WORKFLOW, name="pay")])
    engine.pause([PauseTarget(kind=PauseKind.WORKFLOW, name="sync")])
    assert engine.work.lease_steps(30, 10) == []
    assert engine.work.lease_runs(30, 10) == []
    engine.resume([PauseTarget(kind=PauseKind.WORKFLOW, name="pay")])
    engine.resume([PauseTarget(kind=PauseKind.WORKFLOW, name="sync")])
    assert len(engine.work.lease_steps(30, 10)) == 2
    assert engine.work.lease_runs(30, 10) == ["sync-a"]


def _committing_engine(
    store: EventStore, clock: ManualClock, *, eager_start: bool = False
) -> Engine:
    """An engine whose decisions start limited steps in their own commits (PostgreSQL only:
    the test is skipped elsewhere), its code's limits declared; ``eager_start``: starts decide
    their runs' first steps (left ready, as a limited step is not handed off)."""
    from flow_cli.store.protocol import LimitedStarts

    if not isinstance(store, LimitedStarts):
        pytest.skip("only a store that counts starts in its commits (PostgreSQL)")
    engine = Engine(store, [runtime], clock=clock, worker_id="w1", eager_start=eager_start)
    engine.limits.declare()
    return engine


def test_on_postgres_a_limited_step_starts_in_its_commit_while_its_limit_has_room(
    store: EventStore, clock: ManualClock
) -> None:
    engine = _committing_engine(store, clock)
    runs = _start(engine, "pay", 5)
    start = StartSteps("w1", 30, 10)
    report = engine.decider.decide_many(runs[:2], start=start)
    # Room for both (concurrency 3): started in the decisions' own commit, counted there.
    assert sorted(lease.run_id for lease in report.started) == runs[:2]
    state = {s.target: s for s in engine.limits.list()}["step:charge"]
    assert (state.in_use, state.waiting) == (2, 0)
    # Three more decided at once: one slot is left, so one starts; the others wait ready for a
    # lease, no attempt used (the commit that found no room was redone without the start).
    report = engine.decider.decide_many(runs[2:], start=start)
    assert len(report.started) == 1
    state = {s.target: s for s in engine.limits.list()}["step:charge"]
    assert (state.in_use, state.waiting) == (3, 2)
    assert engine.work.lease_steps(30, 10) == []
    # Leases that lapse free their slots: three of the five ready attempts are leased.
    clock.advance(31)
    assert len(engine.work.lease_steps(30, 10)) == 3


def test_on_postgres_attempts_under_a_generous_limit_start_in_commits_under_a_shared_lock(
    store: EventStore, clock: ManualClock
) -> None:
    engine = _committing_engine(store, clock)
    engine.limits.set("step:charge", concurrency=1_000_000)  # generous: a shared lock
    runs = _start(engine, "pay", 4)
    start = StartSteps("w1", 30, 10)
    assert len(engine.decider.decide_many(runs[:2], start=start).started) == 2
    engine.limits.set("step:charge", concurrency=3)  # no longer: an exclusive lock, exact
    assert len(engine.decider.decide_many(runs[2:3], start=start).started) == 1
    assert engine.decider.decide_many(runs[3:], start=start).started == []
    state = {s.target: s for s in engine.limits.list()}["step:charge"]
    assert (state.in_use, state.waiting) == (3, 1)


def _guard(
    conn: Any, clock: ManualClock, *, shared: bool, explain: bool = False
) -> tuple[bool, str]:
    """Run a commit's check of step ``charge``'s limit for one start on ``conn`` (rolled
    back): whether it found room, and the plan it ran (``explain``)."""
    import psycopg

    from flow_cli.store.postgres import limited

    params = {"name": "charge", "now": clock.now(), "starts": 1, "shared": shared}
    prefix = "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) " if explain else ""
    try:
        with conn.transaction(force_rollback=True):
            conn.execute(limited.LOCK_LIMIT_SHARED if shared else limited.LOCK_LIMIT, params)
            rows = conn.execute(prefix + limited.LIMIT_GUARD, params).fetchall()
    except psycopg.errors.DivisionByZero:
        return False, ""
    return True, "\n".join(str(row[0]) for row in rows) if explain else ""


def test_on_postgres_a_generous_rate_is_read_from_counts_that_never_undercount(
    store: EventStore, clock: ManualClock
) -> None:
    engine = _committing_engine(store, clock)
    # Generous (a shared lock): commits read the starts in the window from per-bucket counts.
    engine.limits.set("step:charge", concurrency=1_000_000, rate="5000/1m")
    runs = _start(engine, "pay", 6)
    start = StartSteps("w1", 30, 10)
    assert len(engine.decider.decide_many(runs[:2], start=start).started) == 2
    clock.advance(31)  # their leases lapse: the lease starts them again, counted too
    assert len(engine.work.lease_steps(30, 10)) == 2
    count = "SELECT (SELECT sum(n) FROM limit_start_counts), count(*) FROM limit_starts"

    def check(conn: Any, shared: bool) -> bool:
        return _guard(conn, clock, shared=shared)[0]

    with store._reading() as conn:  # type: ignore[attr-defined]
        assert conn.execute(count).fetchone() == (4, 4)  # every start counted, none missed
        conn.autocommit = False
        assert check(conn, shared=True) and check(conn, shared=False)
        # Starts that other connections counted: the shared check sees them in the counts
        # (with room left for what commits it cannot see may start), the exact one in the log.
        with conn.transaction():
            conn.execute(
                "INSERT INTO limit_start_counts VALUES ('charge', %s, 0, 3400)",
                (clock.now() + timedelta(seconds=1),),
            )
        assert not check(conn, shared=True)
        assert check(conn, shared=False)
        conn.autocommit = True
    # A minute on, no count is in the window any more: commits start under the shared lock.
    clock.advance(61)
    with store._reading() as conn:  # type: ignore[attr-defined]
        conn.autocommit = False
        assert check(conn, shared=True)
        conn.autocommit = True


def test_on_postgres_a_limits_check_counts_nothing_one_by_one_while_far_from_full(
    store: EventStore, clock: ManualClock
) -> None:
    engine = _committing_engine(store, clock)
    engine.limits.set("step:charge", concurrency=1_000_000, rate="10000000/1s")
    runs = _start(engine, "pay", 3)
    assert len(engine.decider.decide_many(runs, start=StartSteps("w1", 30, 10)).started) == 3
    with store._reading() as conn:  # type: ignore[attr-defined]
        conn.autocommit = False
        # The table is too small to hold enough attempts to fill the limit and the rate's
        # buckets hold too few starts: neither the attempts nor the starts are counted one by
        # one, under a shared lock or an exclusive one (the scans are never executed).
        for shared in (True, False):
            fits, plan = _guard(conn, clock, shared=shared, explain=True)
            scans = [
                line
                for line in plan.splitlines()
                if "Scan on step_tasks" in line or "Scan on limit_starts " in line
            ]
            assert fits and scans and all("(never executed)" in line for line in scans), plan
        conn.autocommit = True


def test_on_postgres_a_generous_limits_check_counts_when_the_tasks_could_fill_it(
    store: EventStore, clock: ManualClock
) -> None:
    from flow_cli.store.postgres import limited

    engine = _committing_engine(store, clock)
    with store._reading() as conn:  # type: ignore[attr-defined]
        margin = conn.execute(
            "SELECT current_setting('max_connections')::bigint * %s", (limited.SHARED_STARTS,)
        ).fetchone()[0]
    # The smallest generous limit: room for what unseen commits may start, twice over.
    engine.limits.set("step:charge", concurrency=2 * margin)
    with store._reading() as conn:  # type: ignore[attr-defined]
        conn.autocommit = False
        assert _guard(conn, clock, shared=True)[0]
        # Ready attempts enough that, with the margin, the limit has no room: the check must
        # count them (the table is then big enough to hold them) and refuse.
        conn.execute(
            "INSERT INTO step_tasks (run_id, step_id, build_id, attempt, available_at,"
            " step_name, priority) SELECT 'ready-' || g, 's', 'b', 1, %s, 'charge', 5"
            " FROM generate_series(1, %s) g",
            (clock.now() - timedelta(seconds=1), margin + 1),
        )
        conn.commit()
        assert not _guard(conn, clock, shared=True)[0]
        # The same number of another step's attempts takes room in the table, not the limit.
        conn.execute("UPDATE step_tasks SET step_name = 'other' WHERE run_id LIKE 'ready-%%'")
        conn.commit()
        assert _guard(conn, clock, shared=True)[0]
        conn.autocommit = True
    # A small limit, checked under an exclusive lock: the table could hold enough to fill it,
    # so the check counts the step's attempts, exactly.
    engine.limits.set("step:charge", concurrency=10)
    with store._reading() as conn:  # type: ignore[attr-defined]
        conn.autocommit = False
        conn.execute("UPDATE step_tasks SET step_name = 'charge' WHERE run_id <= 'ready-2'")
        conn.commit()  # ready-1, ready-10 .. ready-19, ready-2, ... : 11 + 1 + ... of them
        ready = conn.execute(
            "SELECT count(*) FROM step_tasks WHERE step_name = 'charge'"
        ).fetchone()[0]
        assert ready > 10 and not _guard(conn, clock, shared=False)[0]
        conn.execute(
            "UPDATE step_tasks SET step_name = 'other' WHERE step_name = 'charge'"
            " AND run_id NOT IN ('ready-1', 'ready-2')"
        )
        conn.commit()
        assert _guard(conn, clock, shared=False)[0]
        conn.autocommit = True


def test_on_postgres_a_lease_counts_starts_one_by_one_when_their_buckets_leave_too_little(
    store: EventStore, clock: ManualClock
) -> None:
    engine = _committing_engine(store, clock, eager_start=True)
    engine.limits.set("step:ping", rate="200/1m")
    _start(engine, "poll", 12)
    # Buckets that count more starts than the window holds (as one the window's start cuts
    # does): read alone they would leave room for 5 of the 10 asked, so the lease counts the
    # starts one by one (none yet) and takes all 10.
    with store._reading() as conn, conn.transaction():  # type: ignore[attr-defined]
        conn.execute(
            "INSERT INTO limit_start_counts VALUES ('ping', %s, 0, 195)",
            (clock.now() + timedelta(seconds=1),),
        )
    assert len(engine.work.lease_steps(30, 10)) == 10


def test_on_postgres_a_limited_lease_reads_only_the_attempts_it_may_take(
    store: EventStore, clock: ManualClock
) -> None:
    from flow_cli.store.postgres import leasing, limited

    engine = _committing_engine(store, clock, eager_start=True)
    _start(engine, "pay", 30)  # 30 attempts of `charge` ready: a backlog
    now = clock.now()
    params = leasing.due_params("w1", [runtime.build_id], now, now + timedelta(seconds=30), 2)
    explain = "EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) "
    with store._reading() as conn, conn.transaction(force_rollback=True):  # type: ignore[attr-defined]
        # The first 2 in the ready-task index's order, not the whole backlog sorted...
        found = "\n".join(r[0] for r in conn.execute(explain + limited.LOCK_LIMITED, params))
        assert "Index Scan using step_tasks_priority_ready on step_tasks t" in found
        rows, loops = re.search(  # once per limited step (3 here), the rows averaged
            r"rows=(\d+) loops=(\d+)", found.split("on step_tasks t")[1].splitlines()[0]
        ).groups()
        assert int(rows) * int(loops) <= 3  # not 30
        conn.execute(limited.LOCK_LIMITED, params).fetchall()
        conn.execute(limited.LOCK_LIMITS, params).fetchall()
        # ... and those 2 read back by their keys, not by a scan of every open step task.
        lease = "\n".join(r[0] for r in conn.execute(explain + limited.LEASE_LIMITED, params))
        assert "Index Scan using step_tasks_pkey on step_tasks" in lease
        assert "Seq Scan on step_tasks t " not in lease


def test_limited_attempts_whose_leases_lapsed_are_leased_in_one_call(
    store: EventStore, clock: ManualClock
) -> None:
    engine = _engine(store, clock)
    _start(engine, "pay", 3)
    assert len(engine.work.lease_steps(30, 10)) == 3  # w1 then vanishes with them
    other = _engine(store, clock, "w2")
    assert other.work.lease_steps(30, 10) == []  # nothing ready at all
    clock.advance(31)  # no notification says so: the leases lapsed
    assert len(other.work.lease_steps(30, 10)) == 3
