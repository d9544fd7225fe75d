"""``Engine``: the public facade that the command line and applications use.

It composes a store, the hosted runtimes (one per build id), the decider and the step executor.
Entry points that add facts from outside — ``start``, ``signal``, ``resolve_hook``, ``cancel`` —
append with ``append_if_sequence`` semantics like everything else and retry on conflict.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Unpack

from flow_cli.engine.group_commit import GroupCommitter
from flow_cli.engine.inputs import json_input
from flow_cli.engine.lazy import Lazy
from flow_cli.engine.observe import Observer
from flow_cli.engine.options import EngineOptions
from flow_cli.engine.pauses import PauseGate
from flow_cli.engine.results import SignalDelivery, StartResult
from flow_cli.engine.streams import Pending, Streams, Write
from flow_cli.errors import (
    BuildAmbiguous,
    BuildNotHosted,
    ConfigError,
    EventConflict,
    FlowError,
    HookAlreadyResolved,
    HookNotFound,
    HookOfAnotherRun,
    HookTokenInUse,
    RunAlreadyExists,
    RunFinished,
    RunNotFound,
    StoreRefused,
    WorkflowNotFound,
)
from flow_cli.model.clock import Clock, SystemClock
from flow_cli.model.events import (
    CancelRequested,
    Event,
    EventEnvelope,
    HookResolved,
    RetryRequested,
    SignalReceived,
)
from flow_cli.model.jsonval import JsonValue, canonical
from flow_cli.model.names import check_name, check_run_id
from flow_cli.model.snapshot import WorkflowRunSnapshot
from flow_cli.model.spec import WorkflowSpec, check_priority
from flow_cli.model.status import RunStatus
from flow_cli.model.trace import TraceParent
from flow_cli.store.pauses import Pause, PauseTarget
from flow_cli.store.protocol import (
    BuildUsage,
    EventStore,
    HandOffs,
    HookListing,
    NewRun,
    RunCount,
    RunFilter,
    RunRecord,
    RunState,
    StepHeartbeat,
    StreamWrite,
    WorkerInfo,
)

if TYPE_CHECKING:
    from flow_cli.engine.decider import Decider, DecideReport
    from flow_cli.engine.limits import LimitService
    from flow_cli.engine.metrics import MetricsObserver
    from flow_cli.engine.pauses import PauseChange
    from flow_cli.engine.resolve import Resolution, Resolved
    from flow_cli.engine.retention import PruneReport, PruneRequest
    from flow_cli.engine.schedules import ScheduleService
    from flow_cli.engine.steps import StepExecutor
    from flow_cli.engine.talk import QueryResult, UpdateResult
    from flow_cli.engine.worker import TickReport, WorkerSession
    from flow_cli.model.schedule_ref import ScheduleRef
    from flow_cli.runtime import Runtime
    from flow_cli.store.protocol import CauseQuery, CauseTally

MAX_CONFLICT_RETRIES = 100


class Engine:
    """Durable runs over one store, decided by the hosted runtimes.

    Create it with ``Engine.open(url, runtimes=[...])``. All methods are safe to call from
    several threads and from several processes sharing the database.
    """

    def __init__(
        self,
        store: EventStore,
        runtimes: Iterable[Runtime] = (),
        *,
        clock: Clock | None = None,
        worker_id: str | None = None,
        default_build: str | None = None,
        eager_start: bool = True,
    ) -> None:
        self.store = store
        self.handoffs: HandOffs | None = store if isinstance(store, HandOffs) else None
        """The store's hand-offs, when it can make them (PostgreSQL)."""
        self.eager_start = eager_start
        """``start`` decides a new run at once and commits its first decisions with its
        creation, so the first step is ready for a worker without a decision round first."""
        self.clock: Clock = clock or SystemClock()
        self.worker_id = worker_id or f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:6]}"
        self.runtimes: dict[str, Runtime] = {}
        for runtime in runtimes:
            if runtime.build_id in self.runtimes:
                raise ConfigError(f"two runtimes share build id {runtime.build_id!r}")
            self.runtimes[runtime.build_id] = runtime
        if default_build is not None and default_build not in self.runtimes:
            raise BuildNotHosted(default_build, list(self.runtimes))
        self.default_build = default_build
        self.streams = Streams(store)
        self.pause_gate = PauseGate(store)
        """Whether a pause holds a run, for decisions made without a lease (``engine.pauses``)."""
        # The decider and the step executor (and the workflow machinery they import) are made
        # on first use: an engine that only reads, as `flow show` does, never needs them.
        self._decider = Lazy(self._new_decider)
        self._executor = Lazy(self._new_executor)
        self._starts = Lazy(lambda: GroupCommitter(store))
        self._work = Lazy(self._new_work)
        self._schedules = Lazy(self._new_schedules)

    @classmethod
    def open(
        cls,
        url: str,
        runtimes: Sequence[Runtime] = (),
        *,
        create: bool = True,
        **options: Unpack[EngineOptions],
    ) -> Engine:
        """Open the store at ``url`` (``sqlite:///flow.db``, ``postgresql://...``, ``memory://``);
        ``options`` as for ``Engine``."""
        from flow_cli.store import open_store

        hosted = {r.build_id for r in runtimes}
        default_build = options.get("default_build")
        if default_build is not None and default_build not in hosted:
            # Checked before the store opens, so a bad build id never creates a database.
            raise BuildNotHosted(default_build, sorted(hosted))
        return cls(open_store(url, create=create), runtimes, **options)

    @property
    def decider(self) -> Decider:
        """Decides runs: replays their workflow code and commits what it proposes."""
        return self._decider.get()

    def _new_decider(self) -> Decider:
        from flow_cli.engine.decider import Decider
        from flow_cli.engine.limits import StepGate

        decider = Decider(self.streams, self.runtimes, self.clock)
        decider.gate = StepGate(self.store, self.runtimes.values())
        return decider

    @property
    def executor(self) -> StepExecutor:
        """Runs leased step attempts (and the steps that follow them in the same worker)."""
        return self._executor.get()

    def _new_executor(self) -> StepExecutor:
        from flow_cli.engine.steps import StepExecutor

        return StepExecutor(self.streams, self.runtimes, self.clock, self.decider, self.pause_gate)

    @property
    def limits(self) -> LimitService:
        """Flow-control limits: the code's, declared to the database, and overrides."""
        from flow_cli.engine.limits import LimitService

        return LimitService(self)

    @property
    def schedules(self) -> ScheduleService:
        """The stored schedules: managing them and firing the due ones."""
        return self._schedules.get()

    def _new_schedules(self) -> ScheduleService:
        from flow_cli.engine.schedules import ScheduleService

        return ScheduleService(self)

    def prune(self, request: PruneRequest, *, dry_run: bool = False) -> PruneReport:
        """Delete ended runs with their families, archiving them first when asked (``flow
        prune``; see ``engine.retention``); ``dry_run`` only says which would go."""
        from flow_cli.engine.retention import Pruner

        return Pruner(self, request).run(dry_run=dry_run)

    def close(self) -> None:
        if self._decider.made is not None:
            self._decider.made.sticky.close()
        self.store.close()

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def build_ids(self) -> list[str]:
        return list(self.runtimes)

    @property
    def conflicts(self) -> int:
        """``EventConflict``s met and recovered from by this engine."""
        decider, executor = self._decider.made, self._executor.made
        decided = decider.conflicts if decider is not None else 0
        executed = executor.conflicts if executor is not None else 0
        return decided + executed

    # -- starting runs -------------------------------------------------------------------------

    def runtime_for(self, workflow: str, build_id: str | None = None) -> Runtime:
        """The runtime that starts new runs of ``workflow``: ``build_id``'s, else the default
        build's, else the one runtime that defines it. Raises ``BuildAmbiguous`` when several
        do and none is the default: which code a run is pinned to is never guessed."""
        if build_id is not None:
            runtime = self.runtimes.get(build_id)
            if runtime is None:
                raise BuildNotHosted(build_id, list(self.runtimes))
            if workflow not in runtime.workflows:
                raise WorkflowNotFound(workflow, list(runtime.workflows))
            return runtime
        if self.default_build is not None:
            default = self.runtimes[self.default_build]
            if workflow in default.workflows:
                return default
        defining = [r for r in self.runtimes.values() if workflow in r.workflows]
        if len(defining) == 1:
            return defining[0]
        if defining:
            raise BuildAmbiguous(workflow, [r.build_id for r in defining])
        known = sorted({w for r in self.runtimes.values() for w in r.workflows})
        raise WorkflowNotFound(workflow, known)

    def start(
        self,
        workflow: str,
        input: JsonValue = None,
        *,
        run_id: str | None = None,
        build_id: str | None = None,
        signal: tuple[str, JsonValue] | None = None,
        signal_key: str | None = None,
        schedule: ScheduleRef | None = None,
        traceparent: str | None = None,
        attributes: Mapping[str, str | int | float | bool] | None = None,
        priority: int | None = None,
    ) -> StartResult:
        """Create a run. The same id with the same spec is a no-op.

        ``attributes``: search attributes (strings, numbers or booleans) the run starts with,
        over those of the workflow's ``attributes=`` function (``flow runs --attr k=v``).
        ``priority``: 1 (taken first) to 9 (last), default 5: workers take due runs and ready
        steps by priority, then by age; recorded in its spec, inherited by its children
        (raises ``InputError`` outside 1..9). A second start of the same run ignores it.

        ``schedule``: the schedule and fire time that start it (``ctx.scheduled_at``).
        ``traceparent``: the W3C trace context its spans join, recorded in its spec (raises
        ``BadTraceparent`` when malformed); a second start of the same run ignores it.

        With ``eager_start`` (the default), the run's first decisions are made here and
        committed with its creation: its first step is at once ready for a worker.

        ``signal=(name, payload)`` (signal-with-start): the signal is delivered in the
        transaction that creates the run, or to the run with this id and spec that exists
        already (``signal_key`` as for ``signal``); ``StartResult.signal`` says how. The
        workers then make the run's first decision.

        Raises ``WorkflowNotFound``, ``InputError`` (input not JSON), or ``RunAlreadyExists``
        when the id is taken by a run with another spec (workflow, input, build id, patches):
        after a deploy, pass the old ``build_id`` to repeat a start idempotently.
        """
        check_name(workflow, "workflow name")
        priority = check_priority(priority)
        if run_id is not None:
            check_run_id(run_id)
        runtime = self.runtime_for(workflow, build_id)
        value = json_input(input, "run input")
        run_id = run_id or f"{workflow}-{uuid.uuid4().hex[:12]}"
        check_run_id(run_id)
        spec = WorkflowSpec(
            workflow=workflow,
            input=value,
            runtime_build_id=runtime.build_id,
            patches=runtime.patches,
            signals=runtime.signals.get(workflow),
            schedule=schedule,
            traceparent=None if traceparent is None else str(TraceParent.parse(traceparent)),
            attributes=runtime.start_attributes(workflow, value, attributes),
            priority=priority,
        )
        import secrets  # imported here: it loads hashlib and hmac, which readers never need

        now = self.clock.now()
        run = NewRun(run_id=run_id, spec=spec, seed=secrets.token_hex(16), decide_at=now)
        if signal is not None:
            from flow_cli.engine import talk

            sent = talk.create_signalled(self, run, signal, signal_key, now)
            if sent is not None:
                return StartResult(run_id=run_id, created=True, signal=sent)
        elif self._create(run, runtime, now):
            return StartResult(run_id=run_id, created=True)
        existing = self.snapshot(run_id).spec
        if existing.workflow != workflow:
            raise RunAlreadyExists(run_id, f"workflow ({existing.workflow!r})")
        if canonical(existing.input) != canonical(value):
            raise RunAlreadyExists(run_id, "input")
        if existing.runtime_build_id != spec.runtime_build_id:
            raise RunAlreadyExists(run_id, f"build id ({existing.runtime_build_id!r})")
        if existing.patches != spec.patches:
            raise RunAlreadyExists(run_id, f"set of patch markers ({list(existing.patches)})")
        if signal is not None:
            name, payload = signal
            sent = self.deliver_signal(run_id, name, payload, key=signal_key)
            return StartResult(run_id=run_id, created=False, signal=sent)
        return StartResult(run_id=run_id, created=False)

    def _start_committer(self) -> GroupCommitter:
        """What groups the commits of starts made from several threads at once."""
        return self._starts.get()

    def _create(self, run: NewRun, runtime: Runtime, now: datetime) -> bool:
        """Create ``run`` (with its first decisions if ``eager_start``); False if id is taken."""
        spec = run.spec
        held = self.pause_gate.holds(run.run_id, spec.workflow, spec.runtime_build_id)
        # A run a pause holds, or one waiting for a slot of its workflow's limit, is only
        # created (facts still are): a worker's lease decides it later.
        eager = self.eager_start and not held and not self._limited(spec.workflow)
        first = self.decider.first_decisions(run, runtime, now) if eager else None
        if first is not None:
            pending, effects = first
            created = self._hand_off(run, pending)
            try:
                # Starts from several threads at once (a web server's) share commits.
                starts = self._start_committer()
                self.streams.commit_pending([pending], [created, *effects.creates], group=starts)
                return True
            except (EventConflict, HookTokenInUse, StoreRefused):
                # The id is taken (the caller finds out by what), or a child's id or a hook's
                # token the decision claims was taken meanwhile, or the database refused a value
                # the decision made: a worker decides the run then (and records a refusal).
                pass
        return self.store.create_run(run, now) is not None

    def _limited(self, workflow: str) -> bool:
        """Whether runs of ``workflow`` wait for a slot of its limit (not decided at start)."""
        gate = self.decider.gate
        return gate is not None and gate.holds_run(workflow)

    def _hand_off(self, run: NewRun, pending: Pending) -> NewRun:
        """``run``, naming the step its first decisions in ``pending`` made ready, which the
        store may hand to an idle worker in the same commit: that worker runs it without a
        lease of its own (``EventStore.offer_worker``)."""
        from flow_cli.engine.decider import startable_step

        step_id = startable_step(pending, self.decider.gate)
        return run if step_id is None else dataclasses.replace(run, hand_off=step_id)

    # -- facts from outside --------------------------------------------------------------------

    def signal(
        self, run_id: str, name: str, payload: JsonValue = None, *, key: str | None = None
    ) -> int:
        """Deliver signal ``name``; a signal that arrives before its wait is kept for it.

        With ``key`` (an idempotency key), a signal of this name already received with the same
        key is not delivered again: sending twice is sending once. Returns the sequence of the
        ``signal_received`` event (the earlier one when it was already delivered). Raises
        ``RunNotFound``, ``RunFinished``, ``UndeclaredName`` (the workflow declares its signals
        and not this one) and ``SignalKeyReused`` (the key came with another payload).
        """
        return self.deliver_signal(run_id, name, payload, key=key).sequence

    def deliver_signal(
        self, run_id: str, name: str, payload: JsonValue = None, *, key: str | None = None
    ) -> SignalDelivery:
        """``signal``, saying whether it was a duplicate of a keyed signal delivered before."""
        from flow_cli.model.signals import check_declared, earlier_delivery

        check_name(name, "signal name")
        value = json_input(payload, "payload")
        event = SignalReceived(signal_name=name, payload=value, key=key)
        earlier: list[int] = []

        def events(snap: WorkflowRunSnapshot) -> list[Event]:
            check_declared(snap, name)
            sent = earlier_delivery(snap, name, value, key)
            if sent is not None:
                earlier.append(sent.sequence)
                return []
            return [event]

        sequence = self._append_fact(run_id, events, f"signal {name!r}")
        if earlier:
            return SignalDelivery(run_id=run_id, sequence=earlier[-1], duplicate=True)
        return SignalDelivery(run_id=run_id, sequence=sequence, duplicate=False)

    def query(self, run_id: str, name: str, args: JsonValue = None) -> QueryResult:
        """Answer query ``name`` with the run's own handler on its current history; nothing
        is written. A continued run is followed to its live successor; an ended run answers
        too. See ``flow_cli.engine.talk.query`` for the errors."""
        from flow_cli.engine import talk

        return talk.query(self, run_id, name, args)

    def update(
        self,
        run_id: str,
        name: str,
        args: JsonValue = None,
        *,
        update_id: str | None = None,
    ) -> UpdateResult:
        """Apply update ``name``: its handler validates and answers on the current history,
        and the answer is recorded (``update_applied``) for the workflow. The same
        ``update_id`` again returns the recorded answer and writes nothing. See
        ``flow_cli.engine.talk.update`` for the errors."""
        from flow_cli.engine import talk

        return talk.update(self, run_id, name, args, update_id=update_id)

    def resolve_hook(
        self, token: str, payload: JsonValue = None, *, run_id: str | None = None
    ) -> tuple[str, str]:
        """Deliver the callback of the hook with ``token``. Returns ``(run_id, hook_id)``.

        Raises ``HookNotFound`` for an unknown token (``HookOfAnotherRun``, a kind of it, for
        one that belongs to another run than ``run_id``), ``HookAlreadyResolved`` the second
        time, ``RunFinished`` if the run ended.
        """
        value = json_input(payload, "payload")
        record = self.store.find_hook(token)
        if record is None:
            raise HookNotFound(token)
        if run_id is not None and record.run_id != run_id:
            raise HookOfAnotherRun(token, record.run_id, run_id)
        if record.resolved:
            raise HookAlreadyResolved(token, record.run_id, record.hook_id)

        def events(snap: WorkflowRunSnapshot) -> list[Event]:
            hook = snap.hooks.get(record.hook_id)
            if hook is None or hook.token != token:
                raise HookNotFound(token)
            if hook.resolved:
                raise HookAlreadyResolved(token, record.run_id, record.hook_id)
            return [HookResolved(hook_id=hook.hook_id, token=token, payload=value)]

        self._append_fact(record.run_id, events, f"resolve hook {record.hook_id!r}")
        return record.run_id, record.hook_id

    def cancel(self, run_id: str, reason: str = "cancelled by operator") -> bool:
        """Request cancellation. Returns False if it was already requested."""
        requested: list[bool] = []

        def events(snap: WorkflowRunSnapshot) -> list[Event]:
            if snap.cancel_requested:
                return []
            requested.append(True)
            return [CancelRequested(reason=reason)]

        self._append_fact(run_id, events, "cancel it")
        return bool(requested)

    def terminate(self, run_id: str, reason: str = "terminated by operator") -> bool:
        """End the run now without running workflow code (``flow terminate``).

        Writes the closing events of a terminal transition (unsettled steps cancelled,
        ``outcome_unknown`` where an attempt started; children per their policy) and
        ``run_cancelled`` with ``forced: true``, in one commit. Works on a run whose code raises
        on every decision. Returns False when the run had already ended. Raises ``RunNotFound``.
        """
        from flow_cli.model.commands import Cancelled

        command = Cancelled(reason=reason, forced=True)
        for _ in range(MAX_CONFLICT_RETRIES):
            snap = self.snapshot(run_id)
            if snap.terminal:
                return False
            try:
                self.decider.terminate(snap, command, self.clock.now(), reason)
            except EventConflict:
                continue
            return True
        raise FlowError(f"run {run_id!r} is too busy to terminate it; try again")

    def resolve_step(
        self,
        run_id: str,
        step_id: str,
        resolution: Resolution,
        value: JsonValue = None,
        reason: str = "resolved by operator",
    ) -> Resolved:
        """Settle a step whose outcome is unknown (``flow step resolve``): its ``output``, its
        failure (``value``: ``{"type", "message"}``), or a new attempt now; fenced by the
        attempt (``engine.resolve``). Raises ``StepNotUnknown`` (nothing written) otherwise."""
        from flow_cli.engine.resolve import resolution_events

        fenced: list[int] = []

        def events(snap: WorkflowRunSnapshot) -> list[Event]:
            found, attempt = resolution_events(
                snap, step_id, resolution, value, reason, self.clock.now()
            )
            fenced[:] = [attempt]
            return found

        self._append_fact(run_id, events, "resolve its step")
        from flow_cli.engine.resolve import Resolved

        return Resolved(run_id=run_id, step_id=step_id, attempt=fenced[0], resolution=resolution)

    def retry(self, run_id: str, reason: str = "retried by operator") -> RetryRequested | None:
        """Try now the run's failing decision and its steps in back-off (``flow retry``):
        records ``retry_requested`` and makes the run due now. ``None`` (nothing written) when
        nothing waits for a back-off. Raises ``RunFinished`` for an ended run."""
        from flow_cli.engine.resolve import retry_request

        made: list[RetryRequested] = []

        def events(snap: WorkflowRunSnapshot) -> list[Event]:
            request = retry_request(snap, reason)
            made[:] = [] if request is None else [request]
            return [] if request is None else [request]

        self._append_fact(run_id, events, "retry it")
        return made[0] if made else None

    def _append_fact(
        self,
        run_id: str,
        make: Callable[[WorkflowRunSnapshot], list[Event]],
        action: str,
    ) -> int:
        for _ in range(MAX_CONFLICT_RETRIES):
            snap = self.snapshot(run_id)
            if snap.terminal:
                raise RunFinished(run_id, snap.status.value, action)
            events = make(snap)
            if not events:
                return snap.last_sequence
            now = self.clock.now()
            try:
                (after,) = self.streams.commit([Write(snap, events, decide_at=now)], now)
            except EventConflict:
                continue
            return after.last_sequence
        raise FlowError(f"run {run_id!r} is too busy to {action}; try again")

    # -- reading -------------------------------------------------------------------------------

    def snapshot(self, run_id: str) -> WorkflowRunSnapshot:
        """The run's current snapshot, projected from its history. Raises ``RunNotFound``."""
        return self.streams.load(run_id)

    def history(self, run_id: str, after_sequence: int = 0) -> list[EventEnvelope]:
        """The run's committed events after ``after_sequence``. Raises ``RunNotFound``."""
        return self.store.read_history(run_id, after_sequence)

    def step_heartbeats(self, run_id: str) -> list[StepHeartbeat]:
        """The last stored heartbeat (worker, time, details) of each of the run's steps."""
        return self.store.step_heartbeats(run_id)

    def get_run(self, run_id: str) -> RunRecord:
        record = self.store.get_run(run_id)
        if record is None:
            raise RunNotFound(run_id)
        return record

    def find_run(self, run_id: str) -> RunRecord | None:
        """The run's index row, or None when no such run exists."""
        return self.store.get_run(run_id)

    def list_runs(
        self,
        *,
        status: RunStatus | None = None,
        workflow: str | None = None,
        limit: int | None = None,
    ) -> list[RunRecord]:
        """Runs newest first, of one status and one workflow when given."""
        statuses = () if status is None else (status,)
        return self.store.find_runs(RunFilter(statuses=statuses, workflow=workflow, limit=limit))

    def find_runs(self, where: RunFilter) -> list[RunRecord]:
        """Runs matching ``where`` (the command line's FILTERS), newest first."""
        return self.store.find_runs(where)

    def count_runs(self, where: RunFilter, by: str | None = None) -> RunCount:
        """How many runs match ``where``, per ``by`` (a ``GROUPINGS`` column or ``attr:KEY``)."""
        return self.store.count_runs(where, by)

    def run_states(self, where: RunFilter) -> list[RunState]:
        """Runs matching ``where`` with their leases and step tasks (what ``flow doctor`` reads)."""
        return self.store.run_states(where)

    def cause_tally(self, where: RunFilter, query: CauseQuery) -> CauseTally:
        """Open runs per ``flow doctor`` cause, counted by the store, and a few of each."""
        return self.store.cause_tally(where, query)

    def list_hooks(self, run_id: str | None = None, open_only: bool = False) -> list[HookListing]:
        """Hooks of one run (``RunNotFound`` if it does not exist) or of every run."""
        if run_id is not None and self.store.get_run(run_id) is None:
            raise RunNotFound(run_id)
        return self.store.list_hooks(run_id, open_only)

    def build_usage(self) -> list[BuildUsage]:
        """Every build id some run is pinned to, with its open runs."""
        return self.store.build_usage()

    # -- pauses (``flow pause``; see ``flow_cli.engine.pauses``) ----------------------------------

    def pause(self, targets: Sequence[PauseTarget], reason: str | None = None) -> list[PauseChange]:
        """Hold the runs ``targets`` name (runs, or a workflow, or a build: one kind), fleet-wide
        at once: they are not decided and their steps do not start (attempts in flight finish)
        until ``resume``; facts (signals, hook callbacks, updates) are still recorded. A paused
        workflow or build also holds the runs started after the pause.

        Raises ``InputError`` (no target, two kinds), ``RunNotFound``, or ``RunFinished`` (a
        run that has ended), writing nothing.
        """
        from flow_cli.engine import pauses

        pauses.check_targets(self, targets, "pause")
        before = {p.target for p in self.store.list_pauses()}
        self.store.add_pauses(targets, reason, self.clock.now())
        self.pause_gate.forget()
        return [
            pauses.PauseChange(
                target=t, changed=t not in before, open_runs=pauses.open_runs(self, t)
            )
            for t in targets
        ]

    def resume(self, targets: Sequence[PauseTarget]) -> list[PauseChange]:
        """Lift the pauses of ``targets``: their runs are due again at once. A target that was
        not paused is reported unchanged. Raises ``InputError`` as ``pause`` does."""
        from flow_cli.engine import pauses

        pauses.check_targets(self, targets, "resume")
        before = {p.target for p in self.store.list_pauses()}
        # Counted while still held: once lifted, a worker may end some of them at once.
        held = {t: pauses.open_runs(self, t) for t in targets}
        self.store.remove_pauses(targets)
        self.pause_gate.forget()
        return [
            pauses.PauseChange(target=t, changed=t in before, open_runs=held[t]) for t in targets
        ]

    def list_pauses(self) -> list[Pause]:
        """The pauses in force, by kind then target."""
        return self.store.list_pauses()

    def list_workers(self) -> list[WorkerInfo]:
        """The workers registered in the database, live or gone."""
        return self.store.list_workers()

    def check_integrity(self) -> list[str]:
        """What is wrong with the database's structure and indexes; empty when intact."""
        return self.store.check_integrity()

    def wait_for_change(self, timeout: float, *, ending: str | None = None) -> None:
        """Block until something is committed (or ``ending``'s run ends), at most ``timeout``
        seconds: how readers follow a run without polling the database in a loop."""
        self.store.wait_for_change(timeout, ending=ending)

    def commit_facts(
        self,
        writes: Sequence[Write],
        creates: Sequence[NewRun] = (),
        *,
        now: datetime | None = None,
    ) -> list[WorkflowRunSnapshot]:
        """Commit facts for many runs in one transaction (bulk verbs, upgrade, fork): every
        write is checked against the sequence its snapshot saw, and nothing is written if one
        is stale (``EventConflict``). Returns the snapshots after the writes."""
        return self.streams.commit(writes, self.clock.now() if now is None else now, creates)

    def create_with_history(
        self, run: NewRun, writes: Sequence[StreamWrite], created_at: datetime
    ) -> bool:
        """Create ``run`` (its ``run_started`` recorded at ``created_at``) and append ``writes``
        (each at its own ``recorded_at``) in one transaction: a copy of a history (``flow
        fork``) is all there or not at all. False, writing nothing, if the run id is taken."""
        try:
            self.store.commit(writes, [run], created_at)
        except EventConflict as exc:
            if exc.run_id == run.run_id and exc.expected_sequence == 0:
                return False
            raise
        return True

    def metrics_observer(self) -> MetricsObserver:
        """A Prometheus observer whose gauges read this engine's store (extra ``metrics``)."""
        from flow_cli.engine.metrics import MetricsObserver

        return MetricsObserver(self.store)

    # -- driving runs --------------------------------------------------------------------------

    def decide(self, run_id: str) -> DecideReport:
        """Advance one run as far as it can go now (used by workers and tests)."""
        return self.decider.decide(run_id)

    @property
    def work(self) -> WorkerSession:
        """This engine's side of the worker protocol: leases, hand-offs, attempts, the lease
        keeper (``flow_cli.engine.worker``). ``Worker`` and ``tick`` drive it."""
        return self._work.get()

    def _new_work(self) -> WorkerSession:
        from flow_cli.engine.worker import WorkerSession

        return WorkerSession(self)

    @property
    def observer(self) -> Observer:
        """Told what this engine does (``flow_cli.engine.observe``); nobody by default."""
        return self.streams.observer

    def observe(self, observer: Observer) -> None:
        """Tell ``observer`` what this engine does from now on (set it before ``Worker``
        or ``tick`` create their lease keeper)."""
        self.streams.observer = observer

    def tick(
        self,
        *,
        until_idle: bool = False,
        lease_seconds: float = 30.0,
        batch: int = 100,
        max_passes: int = 100_000,
        on_pass: Callable[[TickReport], None] | None = None,
    ) -> TickReport:
        """One scheduler pass (or, with ``until_idle``, passes until nothing is runnable now).

        A pass leases runs that are due (new facts, fired timers) and decides them, then leases
        ready step attempts (new, retries whose backoff elapsed, expired leases) and runs them.
        Future timers and retries stay pending.
        """
        from flow_cli.engine.worker import TickReport

        report = TickReport()
        report.schedules_fired = self.schedules.fire_due(force=True)
        with self.work.lease_keeper(lease_seconds) as keeper:
            for _ in range(max_passes):
                did = self.work.tick_pass(keeper, lease_seconds, batch)
                report.add(did)
                if on_pass is not None:
                    on_pass(report)
                if not until_idle or did.idle:
                    break
        return report

    def next_due(self, within: float | None = None) -> datetime | None:
        """When work is next due (``within`` seconds: ``None`` may mean not that soon)."""
        until = None if within is None else self.clock.now() + timedelta(seconds=within)
        return self.store.next_due(self.build_ids, until)


__all__ = ["Engine", "SignalDelivery", "StartResult"]
