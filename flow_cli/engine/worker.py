"""``Worker``, the long-running loop behind ``flow worker``, and ``WorkerSession``, the worker
protocol it and ``flow tick`` speak with the store (leases, hand-offs, the lease keeper).

It leases due runs and decides them, leases ready step attempts and runs them on a thread pool,
renews the leases of attempts still running, and sleeps until the store says work arrived or the
next timer is due. Stopping (SIGINT/SIGTERM) finishes the attempts in hand, then returns.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Protocol

from flow_cli.engine.decider import StartSteps
from flow_cli.engine.group_commit import GroupCommitter
from flow_cli.engine.health import Liveness
from flow_cli.engine.host import EngineHost
from flow_cli.engine.leases import LeaseKeeper
from flow_cli.errors import StoreError, StoreRefused
from flow_cli.model.snapshot import WorkflowRunSnapshot
from flow_cli.store.protocol import LeaseAsk, StepLease

if TYPE_CHECKING:
    from flow_cli.engine.decider import Decider
    from flow_cli.engine.limits import LimitService
    from flow_cli.engine.retention import RetentionKeeper, RetentionPolicy
    from flow_cli.engine.schedules import ScheduleService
    from flow_cli.engine.steps import StepExecutor, StepOutcome

log = logging.getLogger("flow.worker")

RUN_BATCH = 100
"""Runs a worker leases and decides per pass, their decisions committed together."""

DEFAULT_CONCURRENCY = 32
"""Step attempts a worker runs at once unless told otherwise. Steps mostly wait on I/O, and an
idle thread costs little; each running attempt's commit joins the others' in one transaction,
so a worker with more of them in hand writes more steps per flush (W1 on SQLite: 1,315-1,421
steps/s against 678-931 with 4 threads; docs/benchmarks.md)."""


HANDOFF_SLOTS = 16
"""Starts one offer of an idle worker may serve at most (``postgres.handoffs``; never more
than its free threads) before the worker offers itself again: a busy fleet's starts find an
offer, and its runs gather on the workers that had room last, each committing more steps at a
time (four PostgreSQL workers on a loaded machine: half the commits of one offer per start;
docs/benchmarks.md)."""

HANDOFF_QUIET = 0.02
"""Seconds an idle worker that took handed steps waits at most for them to end before its
own round trips (work then announced is heard at once after it)."""

HANDOFF_AFTER = 0.005
"""Seconds such a worker still waits once they ended, listening but making no round trip of
its own. Whoever started the run is reading its end now, often on the same machine, and the
worker's round trips before it sleeps (its offer, when work is next due) would compete with
that read for the processor and the database. Work announced meanwhile (the next start handing
it a step, when runs come one after another) ends the wait at once: it used to wait the whole
time, adding up to 5 ms to each of such runs."""


class WorkerHost(EngineHost, Protocol):
    """The engine as the worker loop sees it: ``EngineHost`` with the machinery that decides
    runs and runs steps, and the services it drives (see ``Engine``)."""

    @property
    def decider(self) -> Decider: ...

    @property
    def executor(self) -> StepExecutor: ...

    @property
    def limits(self) -> LimitService: ...

    @property
    def schedules(self) -> ScheduleService: ...

    @property
    def work(self) -> WorkerSession: ...


@dataclass(slots=True)
class TickReport:
    """What one or more scheduler passes did."""

    passes: int = 0
    decisions: int = 0
    runs_decided: int = 0
    steps_run: int = 0
    conflicts: int = 0
    decision_failures: int = 0
    schedules_fired: int = 0
    """Runs started by schedules that came due."""

    @property
    def idle(self) -> bool:
        return self.runs_decided == 0 and self.steps_run == 0

    def add(self, other: TickReport) -> None:
        """Count ``other``'s passes into this report."""
        self.passes += other.passes
        self.decisions += other.decisions
        self.runs_decided += other.runs_decided
        self.steps_run += other.steps_run
        self.conflicts += other.conflicts
        self.decision_failures += other.decision_failures
        self.schedules_fired += other.schedules_fired


class WorkerSession:
    """One engine's side of the worker protocol: what ``Worker`` and ``Engine.tick`` do with
    the store. It leases due runs and ready step attempts (``LeaseAsk``), takes the steps a
    start handed to this worker (PostgreSQL), runs attempts, and renews their leases.

    Get it as ``engine.work``; every lease is this engine's ``worker_id``, for its hosted builds.
    """

    def __init__(self, engine: WorkerHost) -> None:
        self.engine = engine
        self._declared = False

    def _ask(self, lease_seconds: float, limit: int) -> LeaseAsk:
        engine = self.engine
        if not self._declared:  # before the first lease: the code's limits, to the database
            self._declared = True
            engine.limits.declare()
        now = engine.clock.now()
        until = now + timedelta(seconds=lease_seconds)
        return LeaseAsk(engine.worker_id, engine.build_ids, now, until, limit)

    def lease_runs(self, lease_seconds: float, limit: int) -> list[str]:
        """Lease up to ``limit`` due runs for ``lease_seconds``; decide them with
        ``engine.decider``."""
        return self.engine.store.lease_runs(self._ask(lease_seconds, limit))

    def lease_steps(self, lease_seconds: float, limit: int) -> list[StepLease]:
        """Lease up to ``limit`` ready step attempts (their ``step_started`` recorded)."""
        return self.engine.store.lease_steps(self._ask(lease_seconds, limit))

    def lease_steps_handed(
        self, lease_seconds: float, limit: int
    ) -> list[tuple[StepLease, WorkflowRunSnapshot | None]]:
        """``lease_steps``, with the runs read in the lease's transaction: each lease comes
        with the snapshot its attempt runs on (for ``execute_step``), or ``None`` where the
        attempt must read the run itself (a second lease of the same run)."""
        streams = self.engine.streams
        leases = self.engine.store.lease_steps(
            self._ask(lease_seconds, limit), read_after=streams.cached_sequence
        )
        return [self._with_snapshot(lease) for lease in leases]

    def _with_snapshot(self, lease: StepLease) -> tuple[StepLease, WorkflowRunSnapshot | None]:
        if lease.history is None:
            return lease, None
        snapshot = self.engine.streams.handed(lease.run_id, lease.history)
        return dataclasses.replace(lease, history=None), snapshot  # not kept while it runs

    def offer_idle(self, lease_seconds: float, slots: int = 1) -> None:
        """Offer this engine's worker for hand-offs (``slots`` starts) before it sleeps (a
        store that cannot tell a worker of one ignores it)."""
        engine = self.engine
        if engine.handoffs is not None:
            engine.handoffs.offer_worker(engine.worker_id, engine.build_ids, lease_seconds, slots)

    def withdraw(self) -> None:
        """Stop being offered for hand-offs (the worker stops)."""
        if self.engine.handoffs is not None:
            self.engine.handoffs.withdraw_worker(self.engine.worker_id)

    def take_handed_steps(self) -> list[tuple[StepLease, WorkflowRunSnapshot | None]]:
        """The steps starts handed to this engine's worker (their ``step_started`` recorded
        in the starts' commits), each with the snapshot to run it on, as
        ``lease_steps_handed`` returns leases."""
        engine = self.engine
        if engine.handoffs is None:
            return []
        handed = engine.handoffs.handed_steps(engine.worker_id, engine.streams.cached_sequence)
        return [self._with_snapshot(lease) for lease in handed]

    def execute_step(
        self,
        lease: StepLease,
        lease_seconds: float = 30.0,
        keeper: LeaseKeeper | None = None,
        *,
        snapshot: WorkflowRunSnapshot | None = None,
    ) -> StepOutcome:
        """Run a leased attempt, then the run's next steps as they become ready (each one leased
        to this engine in the commit that records the previous one's end). ``snapshot``: the
        run as the commit that started the attempt left it (``DecideReport.handed``)."""
        return self.engine.executor.execute(
            lease, self.engine.worker_id, lease_seconds, keeper=keeper, snapshot=snapshot
        )

    def lease_keeper(self, lease_seconds: float) -> LeaseKeeper:
        """A keeper that renews this engine's step leases while their handlers run."""
        engine = self.engine
        return LeaseKeeper(
            engine.store, engine.worker_id, engine.clock, lease_seconds, engine.streams.observer
        )

    def tick_pass(self, keeper: LeaseKeeper, lease_seconds: float, batch: int) -> TickReport:
        """One pass of ``Engine.tick``: decide the due runs, then run the ready attempts
        (those the decisions started, then those leased), in the calling thread."""
        did = TickReport(passes=1)
        started: list[StepLease] = []
        handed: dict[str, WorkflowRunSnapshot] = {}
        run_ids = self.lease_runs(lease_seconds, batch)
        if run_ids:
            start = StartSteps(self.engine.worker_id, lease_seconds, batch)
            result = self.engine.decider.decide_many(run_ids, start=start)
            started, handed = result.started, result.handed
            did.runs_decided += len(run_ids)
            did.decisions += result.decisions
            did.conflicts += result.conflicts
            did.decision_failures += result.decision_failures
        leased = [(lease, handed.pop(lease.run_id, None)) for lease in started]
        for lease, snapshot in leased + self.lease_steps_handed(lease_seconds, batch):
            keeper.hold(lease)
            outcome = self.execute_step(lease, lease_seconds, keeper, snapshot=snapshot)
            did.steps_run += outcome.steps_run
            did.decisions += outcome.decisions
            did.decision_failures += outcome.decision_failures
        return did


@dataclass(slots=True)
class WorkerStats:
    runs_decided: int = 0
    steps_run: int = 0
    store_errors: int = 0
    started: float = field(default_factory=time.monotonic)


class Worker:
    """Drives runs until ``stop()`` is called."""

    def __init__(
        self,
        engine: WorkerHost,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        lease_seconds: float = 30.0,
        max_idle_sleep: float = 1.0,
        on_store_error: Callable[[StoreError], None] | None = None,
        retention: RetentionPolicy | None = None,
    ) -> None:
        self.engine = engine
        self.concurrency = max(1, concurrency)
        self.lease_seconds = lease_seconds
        self.max_idle_sleep = max_idle_sleep
        self.on_store_error = on_store_error
        self.stats = WorkerStats()
        self._stop = threading.Event()
        self._work = engine.work
        self._keeper = self._work.lease_keeper(lease_seconds)
        self._step_done = threading.Event()
        self._finished: list[Future[None]] = []
        """Attempts' futures that ended since the last pass (appended by the step threads)."""
        self._quiet = False
        """The last pass took steps handed to an idle worker (``_idle`` lets them commit)."""
        self.retention: RetentionKeeper | None = None
        """Prunes ended runs in the background (``[flow] retention``), one worker at a time."""
        if retention is not None:
            from flow_cli.engine.retention import RetentionKeeper

            self.retention = RetentionKeeper(engine, retention, self._stop)
        self.liveness = Liveness()
        """Beaten at every turn of the loop and before each wait it means to make: what the
        metrics port's ``/healthz`` reads."""

    def stop(self) -> None:
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def run(self) -> WorkerStats:
        """Work until stopped; returns what was done."""
        self._keeper.start()
        if self.retention is not None:
            self.retention.start()
        # The step threads' commits (an attempt's end with the run's next decision) are grouped.
        self.engine.streams.group = GroupCommitter(self.engine.store)
        pool = ThreadPoolExecutor(self.concurrency, thread_name_prefix="flow-step")
        in_flight: set[Future[None]] = set()
        backoff = 0.5
        outage: float | None = None  # when the database started failing
        try:
            while not self._stop.is_set():
                self.liveness.beat()
                try:
                    busy = self._pass(pool, in_flight)
                    if outage is not None:
                        self.engine.observer.store_recovered(time.monotonic() - outage)
                        outage = None
                    if not busy:
                        self._idle(in_flight)
                    backoff = 0.5
                except StoreError as exc:
                    self.stats.store_errors += 1
                    if isinstance(exc, StoreRefused):
                        # Not an outage (the database answered, and refused one run's data):
                        # said as it is, never as "database unavailable".
                        log.error("%s", exc)
                    else:
                        if outage is None:
                            outage = time.monotonic()
                        if self.on_store_error is not None:
                            self.on_store_error(exc)
                        else:
                            log.warning("%s", exc)
                    self.liveness.beat(waiting=backoff)  # an outage is no stall of the loop
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 10.0)
            self._last_handoffs(pool, in_flight)
        finally:
            pool.shutdown(wait=True)  # finish the attempts in hand before exiting
            self._stop.set()
            self._keeper.stop()
            if self.retention is not None:
                self.retention.join(timeout=10)
            self.engine.streams.group = None
        return self.stats

    def _last_handoffs(self, pool: ThreadPoolExecutor, in_flight: set[Future[None]]) -> None:
        """Stopping: no start may hand this worker a step any more; the steps handed to it
        already run before it exits (else each would wait for its lease to run out)."""
        try:
            self._work.withdraw()
            self._take_handed(pool, in_flight)
        except StoreError as exc:
            log.warning("%s", exc)

    def _take_handed(self, pool: ThreadPoolExecutor, in_flight: set[Future[None]]) -> bool:
        """Run the steps starts handed to this worker (``Engine.take_handed_steps``), busy or
        not: each is leased to it already, and only it will run it before that runs out."""
        handed = self._work.take_handed_steps()
        for lease, snapshot in handed:
            self._keeper.hold(lease)
            in_flight.add(self._submit(pool, lease, snapshot))
        if handed:
            time.sleep(0)  # as for leased steps: let the step threads take the GIL now
        return bool(handed)

    def _pass(self, pool: ThreadPoolExecutor, in_flight: set[Future[None]]) -> bool:
        busy = False
        finished = self._finished
        while finished:  # told by each future as it ends: no look at every one in flight
            in_flight.discard(finished.pop())
        idle = not in_flight
        if self._take_handed(pool, in_flight) and idle:
            # An idle worker woken for these: anything else is announced by the store (a wait
            # returns at once for work heard meanwhile). Looking now would slow their commits.
            self._quiet = True
            return False
        if self.concurrency > len(in_flight) and not self._stop.is_set():
            # Ready steps first: when a commit elsewhere (a run started eagerly) wakes this
            # worker, its step starts before the look for due runs, which then overlaps the
            # step instead of delaying it.
            #
            # A free thread leases what is ready, up to the backlog a pass of decisions may
            # leave (as for the steps decisions start): runs started eagerly elsewhere arrive
            # with their first step ready, and a lease per free thread would cost a
            # transaction per few runs where their decisions here would have cost one a pass.
            room = self.concurrency + RUN_BATCH - len(in_flight)
            # Each attempt's run is read in its lease's transaction, not by its thread after.
            leases = self._work.lease_steps_handed(self.lease_seconds, room)
            for lease, snapshot in leases:
                self._keeper.hold(lease)
                in_flight.add(self._submit(pool, lease, snapshot))
            if leases:
                time.sleep(0)  # let the step threads take the GIL now, not when this loop waits
            # Fewer steps than there was room for: none is ready now, so another pass at once
            # would only compete with the attempts just handed out (a step's end wakes the loop).
            busy = len(leases) == room
        backlog = len(in_flight) - self.concurrency
        run_ids = (
            self._work.lease_runs(self.lease_seconds, RUN_BATCH) if backlog < RUN_BATCH else []
        )
        if run_ids:
            # A step the decisions schedule starts in their own commit and waits in the pool's
            # queue for a thread (its lease is renewed meanwhile): when many timers come due at
            # once, their runs' next steps need no lease transaction each. Every one of them
            # starts so (were it left scheduled, this worker would lease it in a transaction
            # of its own soon after); the pool's backlog stays bounded, as no new run is
            # leased while it is longer than a pass's worth.
            start = StartSteps(self.engine.worker_id, self.lease_seconds, RUN_BATCH)
            report = self.engine.decider.decide_many(run_ids, start=start)
            for lease in report.started:
                self._keeper.hold(lease)
                snapshot = report.handed.pop(lease.run_id, None)
                in_flight.add(self._submit(pool, lease, snapshot))
            self.stats.runs_decided += len(run_ids)
            busy = True
        if self.engine.schedules.fire_due():  # a store read at most twice a second
            busy = True
        return busy

    def _submit(
        self, pool: ThreadPoolExecutor, lease: StepLease, snapshot: WorkflowRunSnapshot | None
    ) -> Future[None]:
        future = pool.submit(self._run_step, lease, snapshot)
        # Set once the future is done, not when the function returns: the pass this wakes must
        # see the attempt finished, or it would count it as running and wait for it again.
        future.add_done_callback(self._step_finished)
        return future

    def _step_finished(self, future: Future[None]) -> None:
        self._finished.append(future)
        self._step_done.set()  # the run likely wants a decision now: wake the main loop

    def _run_step(self, lease: StepLease, snapshot: WorkflowRunSnapshot | None = None) -> None:
        deferred = False
        try:
            outcome = self._work.execute_step(
                lease, self.lease_seconds, self._keeper, snapshot=snapshot
            )
            self.stats.steps_run += outcome.steps_run
            # A chain's first lease was dropped by the executor; a deferred one is dropped by
            # the group committer once its end is recorded (renewed until then).
            deferred = outcome.deferred
        except StoreError as exc:
            self.stats.store_errors += 1
            log.warning("%s", exc)
        except Exception:  # keep the worker alive; the lease expires and another worker retries
            log.exception("step %s of run %s crashed the executor", lease.step_id, lease.run_id)
        finally:
            if not deferred:
                self._keeper.drop(lease)

    def _idle(self, in_flight: set[Future[None]]) -> None:
        if len(in_flight) >= self.concurrency:
            # Every thread is taken: nothing more can start before an attempt ends, and its end
            # wakes us without a store round trip.
            self.liveness.beat(waiting=min(self.max_idle_sleep, 0.25))
            self._step_done.wait(min(self.max_idle_sleep, 0.25))
            self._step_done.clear()
            return
        # A thread is free and the last pass leased all it found: what comes next is new work,
        # which the store announces (a commit elsewhere, a timer coming due). Our attempts'
        # ends commit too, and when they make work the store says so as well.
        if self._quiet:
            # Steps handed to an idle worker: its round trips before it sleeps (when work is
            # next due, its offer) wait for them to end, briefly, not to slow their commits.
            self._quiet = False
            if self._step_done.wait(HANDOFF_QUIET):
                began = time.monotonic()
                self.engine.store.wait_for_change(HANDOFF_AFTER, work_only=True, quiet=True)
                if time.monotonic() - began < HANDOFF_AFTER:
                    self._step_done.clear()
                    return  # work came (or another thread listens): the next pass looks
        self._step_done.clear()
        timeout = self.max_idle_sleep
        due = self.engine.next_due(within=timeout)  # later than that, it looks again anyway
        fire = self.engine.schedules.next_due()  # as last looked up: no round trip
        if fire is not None and (due is None or fire < due):
            due = fire
        if due is not None:
            seconds = (due - self.engine.clock.now()).total_seconds()
            timeout = max(0.0, min(timeout, seconds))
        if timeout > 0:
            # A thread is free: a start may hand this worker its run's first step meanwhile.
            free = self.concurrency - len(in_flight)
            self._work.offer_idle(self.lease_seconds, min(free, HANDOFF_SLOTS))
            self.liveness.beat(waiting=timeout)
            self.engine.store.wait_for_change(timeout, work_only=True)
