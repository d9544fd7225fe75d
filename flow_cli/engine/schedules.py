"""Schedules on the engine: managing them (``flow schedule``) and firing them (every ``flow
worker`` and ``flow tick``).

Firing is claim, start, advance. A worker claims the schedules that are due (the store moves
their ``due_at`` past a short claim, so other workers pass them by), starts each due fire time's
run through ``Engine.start`` with the run id ``ID@<fire time>`` (the same id with the same input
is a no-op: that id, not the claim, is why a fire time starts exactly one run when claims
expire, workers crash or race), then saves the advanced state at the version the claim
returned. A save that loses (an operator updated the schedule meanwhile) changes nothing: the
runs it started stand, and the next claim starts from the operator's state.

The cheap check: a worker asks the store for the earliest ``due_at`` (one index probe) at most
every ``REFRESH_SECONDS`` and claims only when that time has come, so a fleet with no schedule
due writes nothing and a worker's pass reads nothing more than before most of the time.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from flow_cli.errors import (
    BuildAmbiguous,
    BuildNotHosted,
    FlowError,
    RunAlreadyExists,
    RunFinished,
    ScheduleExists,
    ScheduleInvalid,
    ScheduleNotFound,
    StoreError,
    WorkflowNotFound,
)
from flow_cli.model.schedule import (
    Overlap,
    Schedule,
    ScheduleRef,
    ScheduleSpec,
    ScheduleState,
    due_at,
    new_schedule,
    run_id_for,
    utc_text,
)
from flow_cli.model.status import RunStatus

if TYPE_CHECKING:
    from flow_cli.engine.host import EngineHost

log = logging.getLogger("flow.schedules")

CLAIM_SECONDS = 30.0
"""How long a claim keeps other workers off a schedule if its claimer dies before saving."""

REFRESH_SECONDS = 0.5
"""How often a worker asks the store when the next schedule is due (new schedules are seen
within this much)."""

FIRE_BATCH = 100
"""Schedules claimed per claim."""

MAX_STEPS = 10_000
"""Fire times one claim goes through for one schedule (a long outage's missed ones); the rest
are the next claim's."""

MAX_CONFLICTS = 50

FIRE_THREADS = max(1, int(os.environ.get("FLOW_SCHEDULE_THREADS", "8") or 8))
"""Schedules of one claim fired at once (``FLOW_SCHEDULE_THREADS``, default 8): their starts
share commits (the engine groups concurrent starts), so a burst of fire times costs a few
transactions, not one each."""

_CANNOT_START = (WorkflowNotFound, BuildNotHosted, BuildAmbiguous)
"""Why this process cannot start a schedule's workflow: another worker (hosting it) must."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Fired:
    """What one fire time did."""

    schedule_id: str
    scheduled_at: datetime
    action: str
    """``started``, ``existing`` (its run was started before: nothing new), ``skipped``,
    ``buffered``, ``missed``."""
    run_id: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "schedule_id": self.schedule_id,
            "scheduled_at": utc_text(self.scheduled_at),
            "action": self.action,
            "run_id": self.run_id,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class ApplyPlan:
    """What ``flow schedule apply`` does (or would do, with ``--dry-run``)."""

    create: tuple[str, ...] = ()
    update: tuple[str, ...] = ()
    delete: tuple[str, ...] = ()
    unchanged: tuple[str, ...] = ()

    def to_json(self) -> dict[str, list[str]]:
        return {
            "create": list(self.create),
            "update": list(self.update),
            "delete": list(self.delete),
            "unchanged": list(self.unchanged),
        }


class _CannotStart(Exception):
    pass


class ScheduleService:
    """The engine's schedules: ``engine.schedules``."""

    def __init__(self, engine: EngineHost) -> None:
        self.engine = engine
        self.store = engine.store
        self._due: datetime | None = None
        self._looked = -1e18  # monotonic time of the last look at the store
        self._lock = threading.Lock()
        self._warned: set[str] = set()
        self._pool: ThreadPoolExecutor | None = None

    # -- managing -------------------------------------------------------------------------------

    def create(self, spec: ScheduleSpec) -> Schedule:
        """Store a new schedule. Raises ``ScheduleExists``."""
        schedule = new_schedule(spec, self.engine.clock.now())
        if not self.store.create_schedule(schedule):
            raise ScheduleExists(spec.schedule_id)
        self._looked = -1e18
        return self.get(spec.schedule_id)

    def get(self, schedule_id: str) -> Schedule:
        """The schedule. Raises ``ScheduleNotFound``."""
        found = self.store.get_schedule(schedule_id)
        if found is None:
            raise ScheduleNotFound(schedule_id)
        return found

    def all(self) -> list[Schedule]:
        """Every schedule, by id."""
        return self.store.list_schedules()

    def update(self, schedule_id: str, change: Callable[[ScheduleSpec], ScheduleSpec]) -> Schedule:
        """Change the definition; when the timing changed (cron, interval, zone, start, end,
        resumed) the next fire time is the first after now. Raises ``ScheduleNotFound``."""
        for _ in range(MAX_CONFLICTS):
            current = self.get(schedule_id)
            spec = change(current.spec)
            now = self.engine.clock.now()
            state = current.state
            if _timing(spec) != _timing(current.spec) or (current.spec.paused and not spec.paused):
                state = dataclasses.replace(state, next_fire_at=spec.next_fire_time(now))
            changed = dataclasses.replace(
                current, spec=spec, state=state, due_at=due_at(spec, state, now)
            )
            if self.store.save_schedule(changed):
                self._looked = -1e18
                return self.get(schedule_id)
        raise FlowError(f"schedule {schedule_id!r} is too busy to change; try again")

    def pause(self, schedule_id: str, note: str | None = None) -> Schedule:
        """Stop firing (fire times while paused are not fired later)."""
        return self.update(
            schedule_id,
            lambda s: dataclasses.replace(
                s, paused=True, note=note if note is not None else s.note
            ),
        )

    def resume(self, schedule_id: str, note: str | None = None) -> Schedule:
        """Fire again, from the first fire time after now."""
        return self.update(
            schedule_id,
            lambda s: dataclasses.replace(
                s, paused=False, note=note if note is not None else s.note
            ),
        )

    def delete(self, schedule_id: str) -> None:
        """Forget the schedule; its runs stay. Raises ``ScheduleNotFound``."""
        if not self.store.delete_schedule(schedule_id):
            raise ScheduleNotFound(schedule_id)

    def next_fire_times(self, schedule: Schedule, count: int = 5) -> list[datetime]:
        """The schedule's next ``count`` fire times (none while paused)."""
        first = schedule.state.next_fire_at
        if schedule.spec.paused or first is None:
            return []
        times = [first]
        for moment in schedule.spec.fire_times(first):
            if len(times) >= count:
                break
            times.append(moment)
        return times

    def recent(self, schedule: Schedule) -> list[dict[str, Any]]:
        """The runs it started lately, newest first, with their status now."""
        rows: list[dict[str, Any]] = []
        for started in schedule.state.recent:
            record = self.engine.find_run(started.run_id)
            rows.append(
                {
                    "scheduled_at": utc_text(started.scheduled_at),
                    "run_id": started.run_id,
                    "status": None if record is None else record.status.value,
                }
            )
        return rows

    def trigger(self, schedule_id: str) -> Fired:
        """Fire once now (the second it is), under the overlap policy."""
        for _ in range(MAX_CONFLICTS):
            current = self.get(schedule_id)
            now = self.engine.clock.now().replace(microsecond=0)
            state, fired = self._overlap(current.spec, current.state, now, current.spec.overlap)
            changed = dataclasses.replace(
                current, state=state, due_at=due_at(current.spec, state, now)
            )
            if self.store.save_schedule(changed):
                return fired
        raise FlowError(f"schedule {schedule_id!r} is too busy to trigger; try again")

    def backfill(
        self, schedule_id: str, start: datetime, end: datetime, overlap: Overlap | None = None
    ) -> list[Fired]:
        """One run per fire time in ``[start, end]`` (``allow-all`` unless told otherwise),
        each with its fire time's run id: a second backfill of the same range starts nothing.
        Only ``skip`` and ``allow-all`` apply: a backfill never waits for or ends runs."""
        schedule = self.get(schedule_id)
        if start > end:
            raise ScheduleInvalid(
                schedule_id,
                f"--from {utc_text(start)} is after --to {utc_text(end)}",
                "--from 2026-12-01T00:00:00Z --to 2026-12-02T00:00:00Z",
            )
        policy = overlap or Overlap.ALLOW_ALL
        if policy not in (Overlap.ALLOW_ALL, Overlap.SKIP):
            raise ScheduleInvalid(
                schedule_id, f"a backfill cannot use --overlap {policy.value}", "--overlap skip"
            )
        spec = schedule.spec
        done: list[Fired] = []
        state = ScheduleState()
        for moment in spec.fire_times(start - timedelta(microseconds=1)):
            if moment > end:
                break
            state, fired = self._overlap(spec, state, moment, policy)
            done.append(fired)
        return done

    def apply(self, wanted: Sequence[ScheduleSpec], *, dry_run: bool = False) -> ApplyPlan:
        """Make the stored schedules exactly ``wanted``: create, update (the definition; the
        firing state stays) and delete."""
        stored = {s.schedule_id: s for s in self.all()}
        names = {s.schedule_id: s for s in wanted}
        create = [n for n in names if n not in stored]
        update = [n for n in names if n in stored and stored[n].spec != names[n]]
        same = [n for n in names if n in stored and stored[n].spec == names[n]]
        delete = [n for n in stored if n not in names]
        plan = ApplyPlan(
            create=tuple(sorted(create)),
            update=tuple(sorted(update)),
            delete=tuple(sorted(delete)),
            unchanged=tuple(sorted(same)),
        )
        if dry_run:
            return plan
        for name in plan.create:
            self.create(names[name])
        for name in plan.update:
            self.update(name, lambda _, spec=names[name]: spec)  # type: ignore[misc]
        for name in plan.delete:
            self.delete(name)
        return plan

    # -- firing ---------------------------------------------------------------------------------

    def next_due(self) -> datetime | None:
        """When the next schedule is due, as last looked up (no store round trip)."""
        return self._due

    def fire_due(self, *, force: bool = False) -> int:
        """Fire what is due now; returns how many runs were started.

        Without ``force``, the store is asked at most every ``REFRESH_SECONDS`` (or once the
        time it last gave has come), so this is free in a worker's busy loop.
        """
        now = self.engine.clock.now()
        if not force and not self._should_look(now):
            return 0
        with self._lock:
            self._due = self.store.next_schedule_due()
            self._looked = time.monotonic()
            if self._due is None or self._due > now:
                return 0
            claim_until = now + timedelta(seconds=CLAIM_SECONDS)
            claimed = self.store.claim_schedules(now, claim_until, FIRE_BATCH)
            if len(claimed) > 1:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(FIRE_THREADS, "flow-schedule")
                started = sum(self._pool.map(lambda s: self._fire(s, now), claimed))
            else:
                started = sum(self._fire(s, now) for s in claimed)
            self._due = self.store.next_schedule_due()
            return started

    def _should_look(self, now: datetime) -> bool:
        if time.monotonic() - self._looked >= REFRESH_SECONDS:
            return True
        return self._due is not None and self._due <= now

    def _fire(self, schedule: Schedule, now: datetime) -> int:
        """Advance one claimed schedule to ``now``; the runs it started."""
        try:
            state, fired = self.advance(schedule.spec, schedule.state, now)
        except _CannotStart as exc:
            # Give the claim back at once, so that a worker hosting the workflow takes it.
            back = dataclasses.replace(schedule, due_at=now)
            self.store.save_schedule(back)
            if schedule.schedule_id not in self._warned:
                self._warned.add(schedule.schedule_id)
                log.warning(
                    "schedule %s: this worker cannot start it: %s", schedule.schedule_id, exc
                )
            return 0
        except StoreError:
            raise
        except FlowError as exc:  # one schedule's trouble must not stop the worker
            log.error("schedule %s: %s", schedule.schedule_id, exc)
            return 0
        except Exception:  # nor a bug: its claim runs out and another worker tries again
            log.exception("schedule %s crashed its firing", schedule.schedule_id)
            return 0
        saved = dataclasses.replace(schedule, state=state, due_at=due_at(schedule.spec, state, now))
        self.store.save_schedule(saved)  # lost to an operator's change: that state wins
        return sum(1 for f in fired if f.action == "started")

    def advance(
        self, spec: ScheduleSpec, state: ScheduleState, now: datetime
    ) -> tuple[ScheduleState, list[Fired]]:
        """The state after handling every fire time due by ``now`` (and a buffered one whose
        previous run ended), and what each did."""
        fired: list[Fired] = []
        if state.buffered_at is not None and not self._open(state.last_run_id):
            buffered = state.buffered_at
            state, done = self._start(spec, dataclasses.replace(state, buffered_at=None), buffered)
            fired.append(done)
        for _ in range(MAX_STEPS):
            moment = state.next_fire_at
            if moment is None or moment + spec.jitter_for(moment) > now:
                break
            if now - moment > spec.catchup_window:
                state = _skip_missed(spec, state, now - spec.catchup_window)
                fired.append(
                    Fired(schedule_id=spec.schedule_id, scheduled_at=moment, action="missed")
                )
                continue
            state, done = self._overlap(spec, state, moment, spec.overlap)
            fired.append(done)
            state = dataclasses.replace(
                state, last_fired_at=moment, next_fire_at=spec.next_fire_time(moment)
            )
        return state, fired

    def _overlap(
        self, spec: ScheduleSpec, state: ScheduleState, moment: datetime, policy: Overlap
    ) -> tuple[ScheduleState, Fired]:
        previous = state.last_run_id
        if policy is Overlap.ALLOW_ALL or not self._open(previous):
            return self._start(spec, state, moment)
        if previous is not None and policy is Overlap.TERMINATE_OTHER:
            self.engine.terminate(previous, f"schedule {spec.schedule_id}: terminate-other")
            return self._start(spec, state, moment)
        if previous is not None and policy is Overlap.CANCEL_OTHER:
            try:
                self.engine.cancel(previous, f"schedule {spec.schedule_id}: cancel-other")
            except RunFinished:
                return self._start(spec, state, moment)
        if policy in (Overlap.BUFFER_ONE, Overlap.CANCEL_OTHER) and state.buffered_at is None:
            buffered = dataclasses.replace(state, buffered_at=moment)
            return buffered, Fired(
                schedule_id=spec.schedule_id, scheduled_at=moment, action="buffered"
            )
        skipped = dataclasses.replace(state, skipped=state.skipped + 1)
        return skipped, Fired(schedule_id=spec.schedule_id, scheduled_at=moment, action="skipped")

    def _start(
        self, spec: ScheduleSpec, state: ScheduleState, moment: datetime
    ) -> tuple[ScheduleState, Fired]:
        run_id = run_id_for(spec.schedule_id, moment)
        ref = ScheduleRef(schedule_id=spec.schedule_id, scheduled_at=moment)
        try:
            result = self.engine.start(spec.workflow, spec.input, run_id=run_id, schedule=ref)
            created = result.created
        except _CANNOT_START as exc:
            raise _CannotStart(str(exc)) from exc
        except RunAlreadyExists as exc:
            # Started before with another input (the schedule's input changed since): that
            # run is this fire time's run all the same.
            log.warning("schedule %s: %s", spec.schedule_id, exc)
            created = False
        action = "started" if created else "existing"
        done = Fired(
            schedule_id=spec.schedule_id, scheduled_at=moment, action=action, run_id=run_id
        )
        if any(r.run_id == run_id for r in state.recent):
            return state, done
        return state.started(moment, run_id), done

    def _open(self, run_id: str | None) -> bool:
        """Whether the run, or the ``continue_as_new`` chain it began, has not ended."""
        for _ in range(MAX_CONFLICTS):
            if run_id is None:
                return False
            record = self.engine.find_run(run_id)
            if record is None:
                return False
            if record.status is not RunStatus.CONTINUED_AS_NEW:
                return not record.status.terminal
            outcome = self.engine.snapshot(run_id).outcome
            run_id = None if outcome is None else outcome.successor_run_id
        return True  # a chain longer than we follow is still going


def _timing(spec: ScheduleSpec) -> tuple[Any, ...]:
    return (spec.cron, spec.every, spec.timezone, spec.start_at, spec.end_at)


def _skip_missed(spec: ScheduleSpec, state: ScheduleState, cutoff: datetime) -> ScheduleState:
    """Count the fire times before ``cutoff`` (older than the catch-up window) as missed and
    move to the first one after it: intervals by arithmetic, cron by walking the times."""
    moment = state.next_fire_at
    last = state.last_fired_at
    missed = 0
    while moment is not None and moment < cutoff and missed < MAX_STEPS:
        if spec.every is not None:
            step = spec.every.total_seconds()
            n = max(1, int((cutoff - moment).total_seconds() // step))
            missed += n
            last = moment + timedelta(seconds=step * (n - 1))
        else:
            missed += 1
            last = moment
        moment = spec.next_fire_time(last)
    return dataclasses.replace(
        state, missed=state.missed + missed, last_fired_at=last, next_fire_at=moment
    )
