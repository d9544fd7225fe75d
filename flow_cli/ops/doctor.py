"""``flow doctor``: every open run classified by what must happen for it to move.

Served by the indexes alone — the runs table (status, build, ``decide_at`` and its lease,
``failing``, ``waiting_on``), the step tasks and the workers registry — never by reading a
history, so it stays cheap enough for a cron job over a hundred thousand open runs. The table
(``diagnose(keep=N)``) has the store count the runs per cause (``cause_tally``: this rule as one
SQL statement, ``flow_cli.store.causes``) and classifies here only the few it shows.

The rule lives in ``classify``; the first cause that applies wins, in this order:

0. ``paused``: a pause (``flow pause``) names the run, its workflow or its build: it is not
   decided and its steps do not start until ``flow resume`` (whatever else is due or failing
   waits for that). Not stuck: an operator asked for it.
1. ``decision-failing``: the run's last decision failed (its code raised, or diverged from
   history); it is retried with a back-off until fixed code is deployed.
2. ``step-unknown``: an ``on_lost="unknown"`` step's attempt vanished or timed out; nobody
   knows whether its side effect happened, and ``flow step resolve`` settles it.
3. ``build-unhosted``: no live worker hosts the run's build, and either some worker is live (the
   fleet runs without that build) or no registered worker, live or gone, ever hosted it. When
   the build's only hosts are gone workers (stopped, killed, or ``flow tick`` that ended), the run
   is judged by what is overdue instead: the fleet is down, not missing the build.
3b. ``throttled``: a flow-control limit holds the run back (``flow limits``): a ``Pending`` run
   of a limited workflow waits for a slot, or a ready attempt of a limited step does. Not stuck:
   it moves as the limit frees slots (an override changes the limit at once).
4. ``timer-overdue``: a due time — a timer or retry back-off ending in the run's next decision,
   or a step attempt's ready time — passed more than ``overdue_after`` (30 s) ago and no worker
   acted on it.
5. ``lease-expired``: a worker took the run's decision or a step attempt under a lease that ended
   more than ``overdue_after`` ago, and no worker took it over.
6. ``schedule-late`` (not a run: a schedule, named by the run its fire time should have started):
   a schedule's fire time passed more than ``overdue_after`` ago and no worker fired it (none is
   live, or the live ones do not host its workflow).
7. ``step-retrying``: a step attempt failed; its next attempt waits for its back-off.
8. ``step-running``: a worker runs one of its step attempts under a live lease (its worker
   and last heartbeat: ``flow show``).
   ``runnable`` (busy): a decision or a step attempt is due now, or being decided.
9. ``waiting-signal``, ``waiting-hook``, ``waiting-child`` (in that order): the run waits for a
   fact from outside.
10. ``sleeping``: otherwise, a timer (or its next decision) is due in the future; nothing is
   wrong, it wakes by itself. ``runnable`` always means due now.
11. ``runnable``: a run whose index names neither a due time nor a wait (it should not happen;
   shown rather than hidden).

Causes 1 to 6 are stuck (``paused`` comes before them and ``throttled`` after them in
``CAUSES``: neither is): ``flow doctor`` exits 1 when any run (or schedule) is.
"""

from __future__ import annotations

import functools
import urllib.parse
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Protocol, overload

from flow_cli.engine import paging
from flow_cli.engine.paging import paged_by_status
from flow_cli.model.jsonval import json_fields
from flow_cli.model.schedule import Schedule, run_id_for
from flow_cli.model.status import RunStatus
from flow_cli.ops.disk_sort import DiskSort, Key, Row
from flow_cli.store.pauses import Pause, PauseSet
from flow_cli.store.protocol import (
    CauseQuery,
    CauseTally,
    RunFilter,
    RunState,
    StepTask,
    WorkerInfo,
)

CAUSES = (
    "paused",
    "decision-failing",
    "step-unknown",
    "build-unhosted",
    "timer-overdue",
    "lease-expired",
    "schedule-late",
    "throttled",
    "step-retrying",
    "step-running",
    "waiting-signal",
    "waiting-hook",
    "waiting-child",
    "sleeping",
    "runnable",
)
"""Every cause, in order of precedence (``runnable`` for busy runs comes before the waits;
``throttled``, listed after the stuck ones, is checked right after ``build-unhosted``)."""

STUCK = frozenset(CAUSES[1:7])
"""Causes that need an operator: a run with one of these will not move by itself."""

OVERDUE_AFTER = timedelta(seconds=30)
"""How long past due a timer, a ready step or a lease may be before it counts as stuck."""

_WAITS = (("signal", "waiting-signal"), ("hook", "waiting-hook"), ("child", "waiting-child"))


@dataclass(frozen=True, slots=True, kw_only=True)
class Diagnosis:
    """One open run and why it is where it is."""

    run_id: str
    workflow: str
    build_id: str
    cause: str
    """One of ``CAUSES``."""
    detail: str
    """One sentence naming what is due, failing or awaited."""
    since: datetime
    """When the cause began: when its decisions began to fail, the due time, the lease's end,
    when the build was last hosted, or the run's last change (a wait or a retry)."""

    @property
    def stuck(self) -> bool:
        return self.cause in STUCK

    def to_json(self) -> dict[str, str]:
        return {
            **json_fields(self, "run_id", "workflow", "build_id", "cause", "detail"),
            "since": self.since.isoformat(),
        }


@dataclass(frozen=True, slots=True)
class Hosting:
    """Which builds the registered workers host, as ``classify`` needs it."""

    live: frozenset[str]
    """Builds hosted by a live worker."""
    known: Mapping[str, datetime]
    """Builds hosted by any registered worker, live or gone, with the last heartbeat of one."""
    any_live: bool

    @classmethod
    def of(cls, workers: Iterable[WorkerInfo], now: datetime) -> Hosting:
        live: set[str] = set()
        known: dict[str, datetime] = {}
        any_live = False
        for worker in workers:
            alive = worker.live(now)
            any_live = any_live or alive
            for build in worker.builds:
                if alive:
                    live.add(build)
                if build not in known or known[build] < worker.heartbeat_at:
                    known[build] = worker.heartbeat_at
        return cls(frozenset(live), known, any_live)

    def unhosted(self, build_id: str) -> bool:
        """The build-unhosted rule (see the module docstring)."""
        if build_id in self.live:
            return False
        return self.any_live or build_id not in self.known


@dataclass(frozen=True, slots=True)
class DoctorReport:
    runs: Sequence[Diagnosis]
    """Every open run selected, by cause (``CAUSES`` order), then longest first (past
    ``disk_sort.HOLD`` of them, read back from a temporary file as they are iterated)."""
    workers_live: int
    checked_at: datetime
    next_after: str | None = None
    """With a ``limit`` that the page filled: the cursor for the next page (``--after``), the
    last run of the page in listing order (newest first), which ``runs`` (sorted by cause)
    does not show last."""
    counts: Mapping[str, int] | None = None
    """Runs per cause (``runs`` may keep only the first few of each: ``diagnose(keep=N)``);
    ``None``: count ``runs``."""

    @property
    def summary(self) -> dict[str, int]:
        """Runs per cause, every cause present (zero when none)."""
        counts = dict.fromkeys(CAUSES, 0)
        if self.counts is not None:
            counts.update(self.counts)
            return counts
        for diagnosis in self.runs:
            counts[diagnosis.cause] += 1
        return counts

    @property
    def total(self) -> int:
        """Every run (and late schedule) diagnosed, listed in ``runs`` or not."""
        return len(self.runs) if self.counts is None else sum(self.counts.values())

    @property
    def ok(self) -> bool:
        """No run is stuck."""
        if self.counts is not None:
            return not any(n for cause, n in self.counts.items() if cause in STUCK)
        return not any(d.stuck for d in self.runs)

    def to_json(self, *, runs: bool = True) -> dict[str, object]:
        """The ``--json`` document; without ``runs``, ``"runs"`` is an empty list (to be
        written a run at a time: ``flow doctor --json``)."""
        return {
            "ok": self.ok,
            "summary": self.summary,
            "runs": [d.to_json() for d in self.runs] if runs else [],
            "next_after": self.next_after,
        }


class FleetReads(Protocol):
    """What ``diagnose`` reads: an ``Engine`` (or a store, in tests)."""

    def list_workers(self) -> list[WorkerInfo]: ...

    def run_states(self, where: RunFilter) -> list[RunState]: ...

    def list_pauses(self) -> list[Pause]: ...

    def cause_tally(self, where: RunFilter, query: CauseQuery) -> CauseTally: ...


def diagnose(
    store: FleetReads,
    where: RunFilter,
    now: datetime,
    overdue_after: timedelta = OVERDUE_AFTER,
    schedules: Sequence[Schedule] = (),
    limited: frozenset[str] = frozenset(),
    *,
    keep: int | None = None,
    page_size: int | None = None,
) -> DoctorReport:
    """Classify the open runs that ``where`` selects (its terminal statuses are ignored), and
    the ``schedules`` that are late (``schedule_late``); ``limited``: the targets a limit is
    in effect for (``step:NAME``, ``workflow:NAME``).

    Without a ``limit`` the runs are read ``page_size`` (``PAGE_SIZE``) at a time
    (``paged_by_status``); with ``keep``, the report lists only the first ``keep`` of each
    cause (longest first) and counts the rest (``DoctorReport.counts``), so its memory is flat
    in the open runs, and when no pause and no limit is in force the store counts them
    (``cause_tally``) instead of returning a row per run."""
    statuses = tuple(s for s in (where.statuses or tuple(RunStatus)) if not s.terminal)
    workers = store.list_workers()
    hosting = Hosting.of(workers, now)
    selected = replace(where, statuses=statuses)
    paused = store.list_pauses()
    pauses = PauseSet(paused)
    tally: _Tally | None = None
    if keep is not None and statuses and where.limit is None and not paused and not limited:
        tally = _counted(store, selected, hosting, now, overdue_after, keep)
    states: Iterable[RunState] = ()
    if tally is not None:
        pass  # counted by the database
    elif statuses and where.limit is not None:
        states = store.run_states(selected)  # one page, kept for its cursor
    elif statuses:
        states = paged_by_status(store.run_states, selected, page_size or paging.PAGE_SIZE)
    tally = tally or _Tally(keep)
    last: str | None = None
    seen = 0
    for state in states:
        tally.add(classify(state, hosting, now, overdue_after, pauses, limited))
        last = state.run_id
        seen += 1
    if _schedules_wanted(where):
        live = sum(1 for w in workers if w.live(now))
        for schedule in schedules:
            if where.workflow is None or schedule.spec.workflow == where.workflow:
                late = schedule_late(schedule, live, now, overdue_after)
                if late is not None:
                    tally.add(late)
    full = where.limit is not None and seen >= where.limit
    return DoctorReport(
        runs=tally.listed(),
        workers_live=sum(1 for w in workers if w.live(now)),
        checked_at=now,
        next_after=last if full else None,
        counts=tally.counts,
    )


def _counted(
    store: FleetReads,
    where: RunFilter,
    hosting: Hosting,
    now: datetime,
    overdue_after: timedelta,
    keep: int,
) -> _Tally | None:
    """The runs per cause counted by the store (``cause_tally``), and the first ``keep`` of
    each classified here; ``None`` (walk the runs instead) if ``classify`` disagrees with the
    store about a sampled run, or a sample is missing (the run changed or went meanwhile)."""
    query = CauseQuery(
        now=now,
        late=now - overdue_after,
        hosted=hosting.live if hosting.any_live else frozenset(hosting.known),
        last_seen=hosting.known,
        keep=keep,
    )
    counted = store.cause_tally(where, query)
    tally = _Tally(keep)
    for cause, state in counted.samples:
        diagnosis = classify(state, hosting, now, overdue_after)
        if diagnosis.cause != cause:
            return None
        tally.by_cause.setdefault(cause, []).append(diagnosis)
    for cause, n in counted.counts.items():
        if len(tally.by_cause.get(cause, ())) != min(n, keep):
            return None
    tally.counts = dict(counted.counts)
    return tally


class _Tally:
    """Diagnoses by cause: every one (sorted on disk past ``disk_sort.HOLD``), or (``keep``)
    the first ``keep`` of each by (since, run id) and a count, trimmed as they come so that at
    most ``4 * keep`` wait per cause."""

    def __init__(self, keep: int | None) -> None:
        self.keep = keep
        self.counts: dict[str, int] = {}
        self.by_cause: dict[str, list[Diagnosis]] = {}
        self.every = DiskSort(width=len(_ROW)) if keep is None else None

    def add(self, diagnosis: Diagnosis) -> None:
        cause = diagnosis.cause
        self.counts[cause] = self.counts.get(cause, 0) + 1
        if self.every is not None:
            self.every.add(_listing_key(diagnosis), _row(diagnosis))
            return
        kept = self.by_cause.setdefault(cause, [])
        kept.append(diagnosis)
        if self.keep is not None and len(kept) > 4 * self.keep + 16:
            kept.sort(key=_longest_first)
            del kept[self.keep :]

    def listed(self) -> Sequence[Diagnosis]:
        """By cause (``CAUSES`` order), then longest first."""
        if self.every is not None:
            if self.every.on_disk:
                return _SortedOnDisk(self.every)
            return [_diagnosis(row) for row in self.every]
        found: list[Diagnosis] = []
        for cause in CAUSES:
            found += sorted(self.by_cause.get(cause, ()), key=_longest_first)[: self.keep]
        return found


class _SortedOnDisk(Sequence[Diagnosis]):
    """Every diagnosis of a large tally, read back in listing order from its ``DiskSort``."""

    def __init__(self, rows: DiskSort) -> None:
        self._rows = rows

    def __len__(self) -> int:
        return len(self._rows)

    def __iter__(self) -> Iterator[Diagnosis]:
        return (_diagnosis(row) for row in self._rows)

    @overload
    def __getitem__(self, index: int) -> Diagnosis: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[Diagnosis]: ...

    def __getitem__(self, index: int | slice) -> Diagnosis | Sequence[Diagnosis]:
        if isinstance(index, slice):
            start, stop, step = index.indices(len(self))
            if step == 1:
                return [_diagnosis(row) for row in self._rows.slice(start, stop)]
            return list(self)[index]
        position = index + len(self) if index < 0 else index
        if not 0 <= position < len(self):
            raise IndexError(index)
        return _diagnosis(self._rows.slice(position, position + 1)[0])


_ROW = ("run_id", "workflow", "build_id", "cause", "detail", "since")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _listing_key(diagnosis: Diagnosis) -> Key:
    """Cause (``CAUSES`` order), then longest first: the order ``listed`` gives."""
    since = diagnosis.since if diagnosis.since.tzinfo else diagnosis.since.replace(tzinfo=UTC)
    micros = (since - _EPOCH) // timedelta(microseconds=1)
    return CAUSES.index(diagnosis.cause), micros, diagnosis.run_id


def _row(diagnosis: Diagnosis) -> Row:
    d = diagnosis
    return d.run_id, d.workflow, d.build_id, d.cause, d.detail, d.since.isoformat()


def _diagnosis(row: Row) -> Diagnosis:
    run_id, workflow, build_id, cause, detail, since = row
    return Diagnosis(
        run_id=run_id,
        workflow=workflow,
        build_id=build_id,
        cause=cause,
        detail=detail,
        since=datetime.fromisoformat(since),
    )


def _longest_first(diagnosis: Diagnosis) -> tuple[datetime, str]:
    return diagnosis.since, diagnosis.run_id


def _schedules_wanted(where: RunFilter) -> bool:
    """Late schedules are listed unless the filters ask for something only runs have."""
    return not (
        where.build_id or where.failing or where.waiting_on or where.error_type or where.after
    )


def schedule_late(
    schedule: Schedule, live_workers: int, now: datetime, overdue_after: timedelta = OVERDUE_AFTER
) -> Diagnosis | None:
    """``schedule-late`` when the schedule should have been fired more than ``overdue_after``
    ago; ``None`` otherwise. Named by the run its fire time should have started."""
    due = schedule.due_at
    if schedule.spec.paused or due is None or due >= now - overdue_after:
        return None
    fire = schedule.state.buffered_at or schedule.state.next_fire_at or due
    sid = schedule.schedule_id
    if live_workers:
        why = f"no live worker fired it: does one host {schedule.spec.workflow!r}?"
    else:
        why = "no live worker (start `flow worker`)"
    return Diagnosis(
        run_id=run_id_for(sid, fire),
        workflow=schedule.spec.workflow,
        build_id="",
        cause="schedule-late",
        detail=f"schedule {sid!r} was due at {_at(fire)}; {why}",
        since=due,
    )


def classify(
    run: RunState,
    hosting: Hosting,
    now: datetime,
    overdue_after: timedelta = OVERDUE_AFTER,
    pauses: PauseSet | None = None,
    limited: frozenset[str] = frozenset(),
) -> Diagnosis:
    """Why ``run`` (open) is where it is: the first cause that applies (module docstring);
    ``pauses``: the pauses in force."""
    found = functools.partial(_found, run)
    pause = pauses.holding(run.run_id, run.workflow, run.build_id) if pauses else None
    if pause is not None:
        target = pause.target
        named = "it" if target.kind.value == "run" else f"its {target.kind.value} {target.name!r}"
        why = f" ({pause.reason})" if pause.reason else ""
        resume = {"run": run.run_id, "workflow": f"--workflow {target.name}"}.get(
            target.kind.value, f"--build-id {target.name}"
        )
        detail = f"paused{why}: a pause holds {named}; `flow resume {resume}` lets it go on"
        return found("paused", detail, max(pause.paused_at, run.created_at))
    if run.failing is not None:
        return found("decision-failing", run.failing, run.failing_since or run.updated_at)

    unknown = _waiting(run.waiting_on).get("unknown")
    if unknown:
        steps = ", ".join(repr(step) for step in unknown)
        detail = (
            f"step {steps}: the outcome of its attempt is unknown; check the outside system, "
            f"then `flow step resolve {run.run_id} STEP --output J | --fail | --retry`"
        )
        return found("step-unknown", detail, run.updated_at)
    if hosting.unhosted(run.build_id):
        last = hosting.known.get(run.build_id)
        if last is None:
            detail = f"no worker hosts build {run.build_id!r}"
        else:
            detail = f"no live worker hosts build {run.build_id!r} (last host seen {_at(last)})"
        return found("build-unhosted", detail, max(run.updated_at, last or run.updated_at))
    late = now - overdue_after
    free = [t for t in run.tasks if t.owner is None]
    leased = [t for t in run.tasks if t.owner is not None]
    throttled = _throttled(run, free, now, limited)
    if throttled is not None:
        return found("throttled", *throttled)

    overdue: list[tuple[datetime, str]] = [
        (t.available_at, f"{_step(t)} was ready at {_at(t.available_at)}; no worker started it")
        for t in free
        if t.available_at < late
    ]
    if run.decide_at is not None and run.lease_owner is None and run.decide_at < late:
        overdue.append(
            (run.decide_at, f"{_due(run)} was due at {_at(run.decide_at)}; nothing fired it")
        )
    if overdue:
        since, detail = min(overdue)
        return found("timer-overdue", detail, since)

    expired: list[tuple[datetime, str]] = [
        (
            t.available_at,
            f"{_step(t)}: the lease of worker {t.owner} ended at {_at(t.available_at)}",
        )
        for t in leased
        if t.available_at < late
    ]
    if run.decide_at is not None and run.lease_owner is not None and run.decide_at < late:
        expired.append(
            (
                run.decide_at,
                f"decision: the lease of worker {run.lease_owner} ended at {_at(run.decide_at)}",
            )
        )
    if expired:
        since, detail = min(expired)
        return found("lease-expired", detail, since)

    retrying = sorted(
        (t.available_at, t.step_id, t) for t in free if t.attempt > 1 and t.available_at > now
    )
    if retrying:
        task = retrying[0][2]
        return found(
            "step-retrying", f"{_step(task)} starts at {_at(task.available_at)}", run.updated_at
        )

    deciding = run.decide_at is not None and (run.lease_owner is not None or run.decide_at <= now)
    if leased and not deciding:
        task = min(leased, key=lambda t: t.step_id)
        detail = f"{_step(task)} is running on worker {task.owner}"
        return found("step-running", detail, run.updated_at)
    busy = _busy(run, free, leased, now)
    if busy is not None:
        return found("runnable", *busy)

    waits = _waiting(run.waiting_on)
    for kind, cause in _WAITS:
        if waits.get(kind):
            names = ", ".join(repr(name) for name in waits[kind])
            return found(cause, f"{kind} {names}", run.updated_at)
    if run.decide_at is not None:
        return found("sleeping", f"{_due(run)} is due at {_at(run.decide_at)}", run.updated_at)
    return found("runnable", "nothing is due; its index names no wait", run.updated_at)


def _throttled(
    run: RunState, free: list[StepTask], now: datetime, limited: frozenset[str]
) -> tuple[str, datetime] | None:
    """What a limit holds back of ``run``: its admission (a ``Pending`` run of a limited
    workflow, due), or a ready attempt of a limited step."""
    if not limited:
        return None
    target = f"workflow:{run.workflow}"
    if (
        run.status is RunStatus.PENDING
        and target in limited
        and run.lease_owner is None
        and run.decide_at is not None
        and run.decide_at <= now
    ):
        return f"waits for a slot of {target} (`flow limits`)", run.decide_at
    held = sorted(
        (t.available_at, t.step_id, t.name)
        for t in free
        if t.available_at <= now and f"step:{t.name}" in limited
    )
    if held:
        since, step_id, name = held[0]
        return f"step {step_id!r} waits for a slot of step:{name} (`flow limits`)", since
    return None


def _found(run: RunState, cause: str, detail: str, since: datetime) -> Diagnosis:
    return Diagnosis(
        run_id=run.run_id,
        workflow=run.workflow,
        build_id=run.build_id,
        cause=cause,
        detail=detail,
        since=since,
    )


def _busy(
    run: RunState, free: Sequence[StepTask], leased: Sequence[StepTask], now: datetime
) -> tuple[str, datetime] | None:
    """What a worker is doing or is about to do for the run, and since when; None if nothing."""
    if run.decide_at is not None and run.lease_owner is not None:
        return f"being decided by worker {run.lease_owner}", run.updated_at
    if run.decide_at is not None and run.decide_at <= now:
        return "its next decision is due", run.decide_at
    if leased:
        task = min(leased, key=lambda t: t.step_id)
        return f"{_step(task)} is running on worker {task.owner}", run.updated_at
    ready = sorted((t.available_at, t.step_id, t) for t in free if t.available_at <= now)
    if ready:
        return f"{_step(ready[0][2])} is ready to start", ready[0][0]
    return None


def _waiting(waiting_on: str | None) -> dict[str, list[str]]:
    """``KIND:ID`` entries by kind, ids decoded."""
    kinds: dict[str, list[str]] = {}
    for entry in (waiting_on or "").split():
        kind, _, ident = entry.partition(":")
        kinds.setdefault(kind, []).append(urllib.parse.unquote(ident))
    return kinds


def _due(run: RunState) -> str:
    """What the run's ``decide_at`` stands for, as far as the index tells."""
    timers = _waiting(run.waiting_on).get("timer", [])
    if len(timers) == 1:
        return f"timer {timers[0]!r}"
    if timers:
        return f"the first of timers {', '.join(repr(t) for t in timers)}"
    return "its next decision"


def _step(task: StepTask) -> str:
    return f"step {task.step_id!r} attempt {task.attempt}"


def _at(moment: datetime) -> str:
    return moment.isoformat(timespec="seconds")


__all__ = [
    "CAUSES",
    "OVERDUE_AFTER",
    "STUCK",
    "Diagnosis",
    "DoctorReport",
    "Hosting",
    "classify",
    "diagnose",
]
