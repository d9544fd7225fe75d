"""Hand-offs (``flow_cli.store.postgres.handoffs``): a start gives its run's first step to an
idle worker in its own commit. The worker runs it without a lease or a read of its own, so a
one-step run costs two commits, and nothing is lost when no worker can take it: a worker that
is busy, gone or never offered leaves the step ready for an ordinary lease.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from flow_cli import Runtime
from flow_cli.engine.engine import Engine
from flow_cli.model.status import RunStatus, StepStatus

pytestmark = pytest.mark.postgres

psycopg = pytest.importorskip("psycopg")

from flow_cli.store.postgres import PostgresStore  # noqa: E402

shop = Runtime(build_id="shop-1")


@shop.workflow("chain")
def _chain(ctx):  # type: ignore[no-untyped-def]
    x = ctx.input["x"]
    for i in range(ctx.input["steps"]):
        x = ctx.step(f"s{i}", "inc", x)
    return ctx.complete(x)


@shop.step("inc")
def _inc(x, info):  # type: ignore[no-untyped-def]
    return x + 1


@shop.workflow("pair")
def _pair(ctx):  # type: ignore[no-untyped-def]
    members = [ctx.schedule_step(s, "inc", 1) for s in ("a", "b")]
    if all(ctx.step_state(m.step_id) is StepStatus.COMPLETED for m in members):
        return ctx.complete([ctx.step_output(m.step_id) for m in members])
    return ctx.schedule_steps(members, batch_id="ab")


@pytest.fixture
def pair() -> Iterator[tuple[Engine, Engine]]:
    """A worker's engine, and a starting process's, on one schema."""
    url = os.environ.get("FLOW_TEST_POSTGRES")
    if not url:
        pytest.skip("set FLOW_TEST_POSTGRES=postgresql://... to run the PostgreSQL store tests")
    schema = f"flow_handoff_{uuid.uuid4().hex[:12]}"
    worker = Engine(PostgresStore(url, schema=schema), [shop], worker_id="worker-a")
    starter = Engine(PostgresStore(url, schema=schema), [shop], worker_id="starter")
    try:
        yield worker, starter
    finally:
        starter.close()
        store = worker.store
        assert isinstance(store, PostgresStore)
        store.drop_schema()
        worker.close()


def _offered(worker: Engine, slots: int = 1) -> None:
    """``worker`` idle: offered for ``slots`` starts, and listening (the offer is made from
    that connection)."""
    worker.work.offer_idle(30.0, slots)
    worker.store.wait_for_change(0, work_only=True)


def _keys(engine: Engine, run_id: str) -> list[str]:
    return [e.event_key for e in engine.history(run_id)]


def test_a_start_hands_its_first_step_to_an_idle_worker(pair: tuple[Engine, Engine]) -> None:
    worker, starter = pair
    _offered(worker)
    commits = starter.store.stats.durable_commits
    starter.start("chain", {"steps": 1, "x": 1}, run_id="r1")
    assert starter.store.stats.durable_commits - commits == 1
    history = starter.history("r1")
    assert [e.event_key for e in history] == ["run_started", "step_scheduled", "step_started"]
    started = history[-1].event
    assert started.worker == "worker-a"  # type: ignore[union-attr]
    # All in the start's commit: one time for all three.
    assert len({e.recorded_at for e in history}) == 1
    record = starter.get_run("r1")
    assert record is not None and record.last_sequence == 3

    began = time.monotonic()
    worker.store.wait_for_change(5, work_only=True)
    assert time.monotonic() - began < 2.5
    commits = worker.store.stats.durable_commits
    ((lease, snapshot),) = worker.work.take_handed_steps()
    assert (lease.run_id, lease.step_id, lease.attempt) == ("r1", "s0", 1)
    assert lease.lease_until == started.lease_until  # type: ignore[union-attr]
    assert snapshot is not None and snapshot.last_sequence == 3
    assert snapshot.steps["s0"].status is StepStatus.RUNNING
    worker.work.execute_step(lease, snapshot=snapshot)
    # No lease and no read: the step's end with the run's completion is the one commit.
    assert worker.store.stats.durable_commits - commits == 1
    assert _keys(starter, "r1")[-2:] == ["step_completed", "run_completed"]
    assert starter.snapshot("r1").outcome.result == 2  # type: ignore[union-attr]


def test_the_history_a_hand_off_carries_is_the_one_stored(pair: tuple[Engine, Engine]) -> None:
    # The notification's history (and its step_started, which the database writes) must be
    # what a read returns, event for event, or the worker would run on a history that is not.
    worker, starter = pair
    _offered(worker)
    starter.start("chain", {"steps": 2, "x": {"deep": ["é", 1.5, None]}}, run_id="r1")
    worker.store.wait_for_change(5, work_only=True)
    (lease,) = worker.store.handed_steps("worker-a", lambda run_id: 0)
    assert lease.history is not None
    stored = worker.store.read_history("r1")
    assert [(e.sequence, e.event, e.recorded_at) for e in lease.history] == [
        (e.sequence, e.event, e.recorded_at) for e in stored
    ]


def test_a_worker_does_not_decode_the_history_of_a_step_handed_to_another(
    pair: tuple[Engine, Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Every listening worker hears every hand-off; decoding the others' histories cost each
    # worker of a fleet of four three decodes for every one of its own.
    from flow_cli.store.postgres import handoffs

    worker, starter = pair
    store = worker.store
    assert isinstance(store, PostgresStore)
    url = os.environ["FLOW_TEST_POSTGRES"]
    other = Engine(PostgresStore(url, schema=store.schema), [shop], worker_id="worker-b")
    try:
        _offered(other)  # listening, not offered: it hears worker-a's hand-off
        other.work.withdraw()
        _offered(worker)
        decoded: list[str] = []
        real = handoffs.event_from_data

        def counting(key: str, data: object) -> object:
            decoded.append(key)
            return real(key, data)  # type: ignore[arg-type]

        monkeypatch.setattr(handoffs, "event_from_data", counting)
        starter.start("chain", {"steps": 1, "x": 1}, run_id="r1")
        assert _keys(starter, "r1")[-1] == "step_started"
        other.store.wait_for_change(0.5, work_only=True)
        assert other.work.take_handed_steps() == []
        assert decoded == []
        worker.store.wait_for_change(5, work_only=True)
        ((lease, snapshot),) = worker.work.take_handed_steps()
        assert lease.run_id == "r1" and snapshot is not None
        assert decoded == ["run_started", "step_scheduled"]
    finally:
        other.close()


def test_a_history_too_long_to_carry_is_read(pair: tuple[Engine, Engine]) -> None:
    worker, starter = pair
    _offered(worker)
    starter.start("chain", {"steps": 1, "x": 0, "pad": "x" * 20_000}, run_id="big")
    assert _keys(starter, "big")[-1] == "step_started"
    worker.store.wait_for_change(5, work_only=True)
    ((lease, snapshot),) = worker.work.take_handed_steps()
    assert snapshot is not None and snapshot.spec.input["pad"] == "x" * 20_000  # type: ignore[index]
    worker.work.execute_step(lease, snapshot=snapshot)
    assert starter.get_run("big").status is RunStatus.COMPLETED  # type: ignore[union-attr]


def test_an_offer_serves_one_start(pair: tuple[Engine, Engine]) -> None:
    worker, starter = pair
    _offered(worker)
    starter.start("chain", {"steps": 1, "x": 0}, run_id="r1")
    starter.start("chain", {"steps": 1, "x": 0}, run_id="r2")
    assert _keys(starter, "r1")[-1] == "step_started"
    # Not offered again yet: the second start leaves its step ready, and says so.
    assert _keys(starter, "r2") == ["run_started", "step_scheduled"]
    worker.store.wait_for_change(5, work_only=True)
    assert [lease.run_id for lease, _ in worker.work.take_handed_steps()] == ["r1"]
    leased = worker.work.lease_steps_handed(30.0, 10)
    assert [lease.run_id for lease, _ in leased] == ["r2"]


def test_an_offer_of_two_slots_serves_two_starts_and_is_made_again_once_both_are_heard(
    pair: tuple[Engine, Engine],
) -> None:
    worker, starter = pair
    _offered(worker, slots=2)
    for run_id in ("r1", "r2", "r3"):
        starter.start("chain", {"steps": 1, "x": 0}, run_id=run_id)
    assert _keys(starter, "r1")[-1] == "step_started"
    assert _keys(starter, "r2")[-1] == "step_started"
    assert _keys(starter, "r3") == ["run_started", "step_scheduled"]  # the slots are used up
    worker.store.wait_for_change(5, work_only=True)
    handed = worker.work.take_handed_steps()
    assert sorted(lease.run_id for lease, _ in handed) == ["r1", "r2"]
    assert [lease.run_id for lease, _ in worker.work.lease_steps_handed(30.0, 10)] == ["r3"]
    # Both hand-offs heard: the next wait offers the worker again, for two more.
    _offered(worker, slots=2)
    starter.start("chain", {"steps": 1, "x": 0}, run_id="r4")
    assert _keys(starter, "r4")[-1] == "step_started"


def test_a_start_claims_the_latest_offer(pair: tuple[Engine, Engine]) -> None:
    # The worker that had room last most likely has it still; runs gathered on fewer workers
    # commit more steps at a time.
    worker, starter = pair
    store = worker.store
    assert isinstance(store, PostgresStore)
    url = os.environ["FLOW_TEST_POSTGRES"]
    later = Engine(PostgresStore(url, schema=store.schema), [shop], worker_id="worker-b")
    try:
        _offered(worker)
        time.sleep(0.01)
        _offered(later)
        starter.start("chain", {"steps": 1, "x": 0}, run_id="r1")
        assert starter.history("r1")[-1].event.worker == "worker-b"  # type: ignore[union-attr]
        # Its slot used up, the next start goes to the other offer.
        starter.start("chain", {"steps": 1, "x": 0}, run_id="r2")
        assert starter.history("r2")[-1].event.worker == "worker-a"  # type: ignore[union-attr]
    finally:
        later.close()


def test_a_busy_worker_whose_slots_are_used_up_is_offered_again_as_it_takes_its_steps(
    pair: tuple[Engine, Engine],
) -> None:
    # A busy fleet's workers seldom sleep: the offer is made again when the worker takes the
    # steps that used it up, not only before it next sleeps.
    worker, starter = pair
    _offered(worker, slots=1)
    starter.start("chain", {"steps": 1, "x": 0}, run_id="r1")
    assert _keys(starter, "r1")[-1] == "step_started"
    time.sleep(0.2)  # the notification reaches the listening connection
    assert [lease.run_id for lease, _ in worker.work.take_handed_steps()] == ["r1"]
    starter.start("chain", {"steps": 1, "x": 0}, run_id="r2")  # no wait in between
    assert _keys(starter, "r2")[-1] == "step_started"


def test_a_worker_that_heard_fewer_hand_offs_than_its_slots_does_not_offer_again(
    pair: tuple[Engine, Engine],
) -> None:
    # An offer not used up stays: the worker's round trip before it sleeps is saved.
    worker, starter = pair
    _offered(worker, slots=3)
    starter.start("chain", {"steps": 1, "x": 0}, run_id="r1")
    worker.store.wait_for_change(5, work_only=True)
    assert len(worker.work.take_handed_steps()) == 1
    with worker.store._reading() as conn:  # type: ignore[attr-defined]
        offered_at = conn.execute("SELECT offered_at, slots FROM idle_workers").fetchall()
    assert [slots for _, slots in offered_at] == [2]
    _offered(worker, slots=3)
    with worker.store._reading() as conn:  # type: ignore[attr-defined]
        assert conn.execute("SELECT offered_at, slots FROM idle_workers").fetchall() == offered_at


def test_a_worker_offers_itself_again_before_it_sleeps(pair: tuple[Engine, Engine]) -> None:
    worker, starter = pair
    _offered(worker)
    starter.start("chain", {"steps": 1, "x": 0}, run_id="r1")
    worker.store.wait_for_change(5, work_only=True)
    assert len(worker.work.take_handed_steps()) == 1
    _offered(worker)
    starter.start("chain", {"steps": 1, "x": 0}, run_id="r2")
    assert _keys(starter, "r2")[-1] == "step_started"


def test_a_first_decision_with_two_ready_steps_hands_off_neither(
    pair: tuple[Engine, Engine],
) -> None:
    # The hand-off's notification stands in for the commit's own, which would announce both.
    worker, starter = pair
    _offered(worker)
    starter.start("pair", {}, run_id="r1")
    assert "step_started" not in _keys(starter, "r1")
    worker.store.wait_for_change(5, work_only=True)
    assert worker.work.take_handed_steps() == []
    leased = worker.work.lease_steps_handed(30.0, 10)
    assert sorted(lease.step_id for lease, _ in leased) == ["a", "b"]


def test_a_worker_that_never_offered_gets_nothing_handed(pair: tuple[Engine, Engine]) -> None:
    worker, starter = pair
    worker.store.wait_for_change(0, work_only=True)  # listening, not offered
    starter.start("chain", {"steps": 1, "x": 0}, run_id="r1")
    assert _keys(starter, "r1") == ["run_started", "step_scheduled"]
    worker.store.wait_for_change(5, work_only=True)  # woken by the ready step's notification
    assert worker.work.take_handed_steps() == []
    assert [lease.run_id for lease, _ in worker.work.lease_steps_handed(30.0, 10)] == ["r1"]


def test_a_withdrawn_worker_gets_nothing_handed(pair: tuple[Engine, Engine]) -> None:
    worker, starter = pair
    _offered(worker)
    worker.work.withdraw()
    starter.start("chain", {"steps": 1, "x": 0}, run_id="r1")
    assert _keys(starter, "r1") == ["run_started", "step_scheduled"]


def test_the_offer_of_a_worker_whose_connection_died_is_not_claimed(
    pair: tuple[Engine, Engine],
) -> None:
    # A worker killed with SIGKILL leaves its offer behind; its connections close with it.
    worker, starter = pair
    _offered(worker)
    store = worker.store
    assert isinstance(store, PostgresStore)
    listener = store._listener
    assert listener is not None
    pid = listener.info.backend_pid
    with starter.store._reading() as conn:  # type: ignore[attr-defined]
        conn.execute("SELECT pg_terminate_backend(%s)", (pid,))
        for _ in range(100):  # the server process goes away a moment later
            if conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone():
                time.sleep(0.02)
    starter.start("chain", {"steps": 1, "x": 0}, run_id="r1")
    assert _keys(starter, "r1") == ["run_started", "step_scheduled"]


def test_an_offer_whose_server_process_id_was_reused_is_not_claimed(
    pair: tuple[Engine, Engine],
) -> None:
    # After a server restart a new session may get the pid an offer names: the offer also
    # names when its session began, which the new one does not share.
    worker, starter = pair
    _offered(worker)
    with starter.store._reading() as conn:  # type: ignore[attr-defined]
        conn.execute("UPDATE idle_workers SET backend_start = backend_start - interval '1 hour'")
    starter.start("chain", {"steps": 1, "x": 0}, run_id="r1")
    assert _keys(starter, "r1") == ["run_started", "step_scheduled"]


def test_a_worker_of_another_build_gets_nothing_handed(pair: tuple[Engine, Engine]) -> None:
    worker, starter = pair
    worker.store.offer_worker("worker-a", ["other-build"], 30.0)
    worker.store.wait_for_change(0, work_only=True)
    starter.start("chain", {"steps": 1, "x": 0}, run_id="r1")
    assert _keys(starter, "r1") == ["run_started", "step_scheduled"]


def test_a_step_handed_to_a_worker_that_never_runs_it_is_run_once_its_lease_ends(
    pair: tuple[Engine, Engine],
) -> None:
    worker, starter = pair
    worker.work.offer_idle(0.5)  # a short lease, so that this test need not wait long
    worker.store.wait_for_change(0, work_only=True)
    starter.start("chain", {"steps": 1, "x": 0}, run_id="r1")
    assert _keys(starter, "r1")[-1] == "step_started"
    time.sleep(0.6)  # the worker died, say: its lease runs out
    other = Engine(starter.store, [shop], worker_id="worker-b")
    other.tick(until_idle=True)
    assert starter.get_run("r1").status is RunStatus.COMPLETED  # type: ignore[union-attr]
    started = [e.event for e in starter.history("r1") if e.event_key == "step_started"]
    assert [s.worker for s in started] == ["worker-a", "worker-b"]  # type: ignore[attr-defined]


ROOT = Path(__file__).resolve().parent.parent


def _spawn_worker(url: str, schema: str, lease_seconds: float) -> subprocess.Popen[bytes]:
    """A real worker process (``tests/worker_process.py``) hosting ``load_workflows``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    return subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tests" / "worker_process.py"),
            url,
            "load_workflows:runtime",
            "--schema",
            schema,
            "--lease-seconds",
            str(lease_seconds),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _offers(engine: Engine) -> list[str]:
    with engine.store._reading() as conn:  # type: ignore[attr-defined]
        return [row[0] for row in conn.execute("SELECT worker_id FROM idle_workers")]


def _until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


@contextmanager
def _working(engine: Engine) -> Iterator[None]:
    """A worker loop on ``engine`` in a thread (two step threads), offered before this yields."""
    from flow_cli.engine.worker import Worker

    worker = Worker(engine, concurrency=2, max_idle_sleep=0.2)
    thread = threading.Thread(target=worker.run)
    thread.start()
    try:
        _until(lambda: _offers(engine) == [engine.worker_id], 10, "the worker's offer")
        yield
    finally:
        worker.stop()
        thread.join(30)


def _one_after_another(starter: Engine, count: int) -> Iterator[str]:
    """Start one-step runs ``r0``, ``r1``, ..., each once the one before ended; yield each
    id once its run ended."""
    for i in range(count):
        run_id = f"r{i}"
        starter.start("chain", {"steps": 1, "x": i}, run_id=run_id)
        _until(lambda r=run_id: _keys(starter, r)[-1] == "run_completed", 10, "the run's end")
        yield run_id


@pytest.fixture
def fleet() -> Iterator[tuple[Engine, Callable[[float], subprocess.Popen[bytes]]]]:
    """An engine hosting ``load_workflows`` on a fresh schema, and a way to start real worker
    processes on it (lease seconds given), stopped at the end."""
    import load_workflows

    url = os.environ.get("FLOW_TEST_POSTGRES")
    if not url:
        pytest.skip("set FLOW_TEST_POSTGRES=postgresql://... to run the PostgreSQL store tests")
    schema = f"flow_handoff_{uuid.uuid4().hex[:12]}"
    store = PostgresStore(url, schema=schema)
    engine = Engine(store, [load_workflows.runtime])
    workers: list[subprocess.Popen[bytes]] = []

    def spawn(lease_seconds: float) -> subprocess.Popen[bytes]:
        workers.append(_spawn_worker(url, schema, lease_seconds))
        return workers[-1]

    try:
        yield engine, spawn
    finally:
        for worker in workers:
            if worker.poll() is None:
                worker.send_signal(signal.SIGTERM)
                worker.wait(30)
        store.drop_schema()
        engine.close()


@pytest.mark.slow
def test_a_worker_killed_while_offered_is_not_handed_the_next_run(
    fleet: tuple[Engine, Callable[[float], subprocess.Popen[bytes]]],
) -> None:
    # Real processes: worker A offers itself and is killed with SIGKILL (its offer stays
    # behind); worker B offers itself; a run started then must reach B (or a lease), not wait
    # for A's lease, which is made long here, to run out.
    engine, spawn = fleet
    first = spawn(120)
    _until(lambda: len(_offers(engine)) == 1, 20, "worker A's offer")
    (dead,) = _offers(engine)
    first.send_signal(signal.SIGKILL)
    first.wait(10)
    spawn(120)
    # (B's first offer also clears A's: its connection is gone.)
    _until(lambda: any(w != dead for w in _offers(engine)), 20, "worker B's offer")
    engine.start("five-steps", {}, run_id="after-kill")
    _until(lambda: engine.get_run("after-kill").status.terminal, 30, "the run to end")
    started = [e.event for e in engine.history("after-kill") if e.event_key == "step_started"]
    assert started and all(s.worker != dead for s in started)  # type: ignore[attr-defined]
    assert engine.get_run("after-kill").status is RunStatus.COMPLETED


@pytest.mark.slow
def test_a_worker_process_runs_what_starts_hand_it(
    fleet: tuple[Engine, Callable[[float], subprocess.Popen[bytes]]],
) -> None:
    engine, spawn = fleet
    worker = spawn(30)
    handed = 0
    for i in range(5):
        _until(lambda: len(_offers(engine)) == 1, 20, "the worker's offer")
        engine.start("five-steps", {}, run_id=f"r{i}")
        _until(lambda i=i: engine.get_run(f"r{i}").status.terminal, 30, "the run to end")
        history = engine.history(f"r{i}")
        assert history[-1].event_key == "run_completed"
        # Handed off: the first step started in the start's own commit.
        handed += history[2].event_key == "step_started" and (
            history[2].recorded_at == history[0].recorded_at
        )
    assert handed == 5
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    # A worker that stops takes its offer back.
    assert _offers(engine) == []


def test_work_announced_with_a_hand_off_is_looked_for_after_it(
    pair: tuple[Engine, Engine],
) -> None:
    # A pass that takes handed steps only does not look for other work (it would slow their
    # commits): the wait after it must then return at once for what came with the hand-off.
    worker, starter = pair
    _offered(worker)
    starter.start("chain", {"steps": 1, "x": 0}, run_id="handed")
    starter.start("pair", {}, run_id="ready")  # two ready steps: announced, not handed
    worker.store.wait_for_change(5, work_only=True)
    assert [lease.run_id for lease, _ in worker.work.take_handed_steps()] == ["handed"]
    began = time.monotonic()
    worker.store.wait_for_change(5, work_only=True)
    assert time.monotonic() - began < 1.0
    leased = worker.work.lease_steps_handed(30.0, 10)
    assert sorted(lease.step_id for lease, _ in leased) == ["a", "b"]
    # Looked for: the next wait sleeps until something new comes.
    began = time.monotonic()
    worker.store.wait_for_change(0.5, work_only=True)
    assert time.monotonic() - began >= 0.4


def test_a_step_handed_just_before_the_worker_withdraws_still_reaches_it(
    pair: tuple[Engine, Engine],
) -> None:
    # A worker stopping takes its offer back, then runs what was handed to it: a start that
    # claimed the offer first must be among those, or its step would wait for its lease.
    worker, starter = pair
    _offered(worker)
    starter.start("chain", {"steps": 1, "x": 0}, run_id="r1")
    worker.work.withdraw()  # its notification not read yet
    assert [lease.run_id for lease, _ in worker.work.take_handed_steps()] == ["r1"]
    starter.start("chain", {"steps": 1, "x": 0}, run_id="r2")
    assert _keys(starter, "r2") == ["run_started", "step_scheduled"]


def test_a_hand_off_heard_during_a_statement_on_the_listener_still_reaches_the_worker(
    pair: tuple[Engine, Engine],
) -> None:
    # A notification that comes in while the worker runs a statement on its listening
    # connection (its withdrawal, a step's end) is kept aside by psycopg, not left on the
    # socket: taking the handed steps must read it there too. (Under load, a withdrawal raced
    # the start's notification this way.)
    worker, starter = pair
    _offered(worker)
    starter.start("chain", {"steps": 1, "x": 0}, run_id="r1")
    listener = worker.store._listener  # type: ignore[attr-defined]
    assert select.select([listener.fileno()], [], [], 5)[0]  # the notification is here
    listener.execute("SELECT 1")  # read with the answer, and kept aside
    assert [lease.run_id for lease, _ in worker.work.take_handed_steps()] == ["r1"]


def test_a_worker_offers_itself_again_only_a_moment_after_its_handed_steps_end(
    pair: tuple[Engine, Engine],
) -> None:
    # The round trips a worker makes before it sleeps (its offer, when work is next due) wait
    # HANDOFF_AFTER past the end of the steps handed to it: the run's caller reads the end then.
    from flow_cli.engine.worker import HANDOFF_AFTER

    worker_engine, starter = pair
    offers: list[float] = []
    offer = worker_engine.work.offer_idle

    slots_offered: list[int] = []

    def timed_offer(lease_seconds: float, slots: int = 1) -> None:
        offers.append(time.time())  # the clock the events' times are read from
        slots_offered.append(slots)
        offer(lease_seconds, slots)

    worker_engine.work.offer_idle = timed_offer  # type: ignore[method-assign]
    with _working(worker_engine):
        for run_id in _one_after_another(starter, 3):
            history = starter.history(run_id)
            assert history[2].event.worker == "worker-a"  # type: ignore[union-attr]
            ended = history[-1].recorded_at.timestamp()  # taken before that commit
            _until(lambda e=ended: max(offers) > e, 10, "the worker's next offer")  # type: ignore[misc]
            assert min(t for t in offers if t > ended) - ended >= HANDOFF_AFTER
        # Never more starts than the worker has free threads for.
        assert set(slots_offered) <= {1, 2} and 2 in slots_offered


def test_a_quiet_wait_listens_without_making_the_offer(pair: tuple[Engine, Engine]) -> None:
    worker, starter = pair
    worker.work.offer_idle(30.0, 1)
    worker.store.wait_for_change(0, work_only=True, quiet=True)
    assert _offers(starter) == []  # no round trip of its own
    worker.store.wait_for_change(0, work_only=True)
    assert _offers(starter) == ["worker-a"]


def test_a_start_while_the_worker_waits_after_a_handed_step_ends_that_wait(
    pair: tuple[Engine, Engine], monkeypatch: pytest.MonkeyPatch
) -> None:
    # After its handed steps end, a worker waits HANDOFF_AFTER before its own round trips (the
    # run's caller reads the end then). It listens meanwhile: the next start's hand-off ends
    # the wait, instead of waiting out the whole of it (runs coming one after another).
    from flow_cli.engine import worker as worker_module

    monkeypatch.setattr(worker_module, "HANDOFF_AFTER", 2.0)  # long: every start lands in it
    worker_engine, starter = pair
    store = worker_engine.store
    quiet_waits: list[float] = []
    wait = store.wait_for_change

    def recorded(timeout: float, **options: object) -> None:
        began = time.monotonic()
        wait(timeout, **options)  # type: ignore[arg-type]
        if options.get("quiet"):
            quiet_waits.append(time.monotonic() - began)

    monkeypatch.setattr(store, "wait_for_change", recorded)
    with _working(worker_engine):
        ended = list(_one_after_another(starter, 3))
    assert quiet_waits, "the worker never waited quietly after a handed step"
    assert min(quiet_waits) < 1.0  # a start's hand-off ended one
    assert all(starter.get_run(run_id).status is RunStatus.COMPLETED for run_id in ended)
