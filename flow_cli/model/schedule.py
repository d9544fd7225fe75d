"""Schedules: a workflow started on a cron expression or an interval, and when it fires.

A schedule is its definition (``ScheduleSpec``, what ``flow schedule create`` and ``flow.toml``'s
``[schedules.ID]`` tables say) and its firing state (``ScheduleState``: the next fire time, the
last run, what was skipped or missed). Fire times are computed here, purely: cron expressions in
the schedule's IANA time zone by ``cronsim`` (Vixie cron's daylight-saving rules: a time that does
not exist on a spring-forward day fires at the first minute after the change, an ambiguous time on
a fall-back day fires once), intervals on a grid anchored at ``start_at`` or the Unix epoch, so
every worker computes the same times without talking to the others.

A fire time starts the run ``ID@<fire time in UTC to the second>`` (``run_id_for``): the run id is
what makes a fire time start exactly one run however many workers race for it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any

from flow_cli.errors import ScheduleInvalid
from flow_cli.model.clock import parse_utc
from flow_cli.model.jsonval import JsonValue
from flow_cli.model.schedule_ref import ScheduleRef as ScheduleRef  # re-exported
from flow_cli.model.schedule_ref import utc_text as utc_text

CRON_ALIASES = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
"""The ``@`` forms Vixie cron knows (``@reboot`` aside), as five fields."""

DEFAULT_CATCHUP = timedelta(hours=1)
"""Fire times missed by at most this much (no worker ran) are still fired; older ones count
as missed."""

RECENT_KEPT = 10
"""Runs a schedule remembers it started (``flow schedule show``'s ``recent``)."""

BUFFER_POLL = timedelta(seconds=1)
"""How often a schedule holding a buffered fire time looks whether its previous run ended."""

_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$")


class Overlap(StrEnum):
    """What a fire time does while the schedule's previous run is still open."""

    SKIP = "skip"
    """Start nothing; count it as skipped (the default)."""
    BUFFER_ONE = "buffer-one"
    """Start it when the previous run ends; at most one waits (later ones are skipped)."""
    ALLOW_ALL = "allow-all"
    """Start it anyway."""
    CANCEL_OTHER = "cancel-other"
    """Ask the previous run to cancel, and start this one once it has ended."""
    TERMINATE_OTHER = "terminate-other"
    """Terminate the previous run (``flow terminate``), then start this one at once."""


def parse_overlap(text: str, schedule_id: str = "?") -> Overlap:
    """The overlap policy named ``text``. Raises ``ScheduleInvalid``."""
    try:
        return Overlap(text.strip().lower())
    except ValueError:
        names = ", ".join(o.value for o in Overlap)
        raise ScheduleInvalid(
            schedule_id, f"overlap {text!r} is not a policy (one of {names})", "--overlap skip"
        ) from None


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleSpec:
    """A schedule's definition: what starts, when, and what happens on overlap."""

    schedule_id: str
    """The schedule's id; its runs are ``ID@<fire time>``."""
    workflow: str
    """The workflow each fire time starts."""
    cron: str | None = None
    """Five cron fields or an ``@`` alias, read in ``timezone``; exactly one of cron/every."""
    every: timedelta | None = None
    """An interval (whole seconds, at least one), on a grid anchored at ``start_at`` or the
    Unix epoch."""
    timezone: str = "UTC"
    """IANA time zone the cron expression is read in."""
    input: JsonValue = None
    """Each run's input."""
    overlap: Overlap = Overlap.SKIP
    catchup_window: timedelta = DEFAULT_CATCHUP
    jitter: timedelta = timedelta(0)
    """Each fire time's run starts up to this much later (the same delay on every worker,
    derived from the schedule id and the fire time); the run id keeps the fire time."""
    start_at: datetime | None = None
    """No fire time before this."""
    end_at: datetime | None = None
    """No fire time after this."""
    paused: bool = False
    note: str | None = None
    """Why it was paused, or any remark (``pause --note``)."""

    def __post_init__(self) -> None:
        check_spec(self)

    @property
    def expression(self) -> str:
        """The five cron fields this schedule's ``cron`` stands for."""
        cron = (self.cron or "").strip()
        return CRON_ALIASES.get(cron.lower(), cron)

    def fire_times(self, after: datetime) -> Iterator[datetime]:
        """The fire times strictly after ``after`` (UTC, whole seconds), in order, bounded by
        ``start_at`` and ``end_at``."""
        start = after
        if self.start_at is not None and self.start_at - timedelta(seconds=1) > start:
            start = self.start_at - timedelta(seconds=1)
        times = self._interval_times(start) if self.every is not None else self._cron_times(start)
        for moment in times:
            if self.end_at is not None and moment > self.end_at:
                return
            yield moment

    def next_fire_time(self, after: datetime) -> datetime | None:
        """The first fire time strictly after ``after``; ``None`` when there is none."""
        return next(self.fire_times(after), None)

    def _interval_times(self, after: datetime) -> Iterator[datetime]:
        if self.every is None:
            return
        step = int(self.every.total_seconds())
        anchor = self.start_at or datetime(1970, 1, 1, tzinfo=UTC)
        offset = int((after - anchor).total_seconds() // step) + 1
        while True:
            yield anchor + timedelta(seconds=offset * step)
            offset += 1

    def _cron_times(self, after: datetime) -> Iterator[datetime]:
        from zoneinfo import ZoneInfo

        from cronsim import CronSim

        zone = ZoneInfo(self.timezone)
        for local in CronSim(self.expression, after.astimezone(zone)):
            yield local.astimezone(UTC)

    def jitter_for(self, fire_time: datetime) -> timedelta:
        """How much later than ``fire_time`` its run starts: the same on every worker."""
        span = int(self.jitter.total_seconds() * 1000)
        if span <= 0:
            return timedelta(0)
        digest = hashlib.sha256(f"{self.schedule_id}@{utc_text(fire_time)}".encode()).digest()
        return timedelta(milliseconds=int.from_bytes(digest[:8], "big") % (span + 1))

    def to_json(self) -> dict[str, Any]:
        """The stored form (also what ``flow schedule show --json`` starts from)."""
        return {
            "schedule_id": self.schedule_id,
            "workflow": self.workflow,
            "cron": self.cron,
            "every": None if self.every is None else int(self.every.total_seconds()),
            "timezone": self.timezone,
            "input": self.input,
            "overlap": self.overlap.value,
            "catchup_window": self.catchup_window.total_seconds(),
            "jitter": self.jitter.total_seconds(),
            "start_at": None if self.start_at is None else utc_text(self.start_at),
            "end_at": None if self.end_at is None else utc_text(self.end_at),
            "paused": self.paused,
            "note": self.note,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScheduleSpec:
        return cls(
            schedule_id=data["schedule_id"],
            workflow=data["workflow"],
            cron=data.get("cron"),
            every=None if data.get("every") is None else timedelta(seconds=data["every"]),
            timezone=data.get("timezone", "UTC"),
            input=data.get("input"),
            overlap=Overlap(data.get("overlap", Overlap.SKIP.value)),
            catchup_window=timedelta(seconds=data.get("catchup_window", 3600)),
            jitter=timedelta(seconds=data.get("jitter", 0)),
            start_at=_time(data.get("start_at")),
            end_at=_time(data.get("end_at")),
            paused=bool(data.get("paused", False)),
            note=data.get("note"),
        )


def check_spec(spec: ScheduleSpec) -> None:
    """Raise ``ScheduleInvalid`` naming the first thing wrong with ``spec`` and a right one."""
    sid = spec.schedule_id
    if not _ID.match(sid):
        raise ScheduleInvalid(
            sid,
            "the id must be 1-128 letters, digits, '.', '_', ':' or '-', starting with a "
            "letter or digit (it begins each run id)",
            "nightly-report",
        )
    if (spec.cron is None) == (spec.every is None):
        raise ScheduleInvalid(sid, "give exactly one of --cron and --every", "--cron '0 9 * * *'")
    if spec.cron is not None:
        _check_cron(sid, spec.expression, spec.cron)
    if spec.every is not None:
        seconds = spec.every.total_seconds()
        if seconds < 1 or seconds != int(seconds):
            raise ScheduleInvalid(
                sid, f"interval {seconds:g}s is not a whole number of seconds, at least 1", "15m"
            )
    _check_zone(sid, spec.timezone)
    for name, value in (("catch-up window", spec.catchup_window), ("jitter", spec.jitter)):
        if value < timedelta(0):
            raise ScheduleInvalid(sid, f"the {name} is negative", "--jitter 30s")
    if spec.start_at is not None and spec.end_at is not None and spec.start_at > spec.end_at:
        raise ScheduleInvalid(
            sid,
            f"--start-at {utc_text(spec.start_at)} is after --end-at {utc_text(spec.end_at)}",
            "--start-at 2026-12-01T00:00:00Z --end-at 2027-01-01T00:00:00Z",
        )


def _check_cron(sid: str, expression: str, written: str) -> None:
    from cronsim import CronSim, CronSimError

    example = "--cron '0 9 * * 1-5' (09:00 on weekdays) or --cron @daily"
    if expression.startswith("@"):
        aliases = ", ".join(CRON_ALIASES)
        raise ScheduleInvalid(sid, f"cron {written!r} is not one of {aliases}", example)
    if len(expression.split()) != 5:
        raise ScheduleInvalid(
            sid, f"cron {written!r} needs five fields (minute hour day month weekday)", example
        )
    try:
        CronSim(expression, datetime(2026, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        raise ScheduleInvalid(sid, f"cron {written!r} is not valid ({exc})", example) from None


def _check_zone(sid: str, zone: str) -> None:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        if not zone or zone != zone.strip() or zone.startswith(("/", ".")):
            raise ValueError(zone)
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ScheduleInvalid(
            sid, f"time zone {zone!r} is not an IANA zone name", "--timezone Europe/Berlin"
        ) from None


@dataclass(frozen=True, slots=True, kw_only=True)
class RecentRun:
    """A run a schedule started."""

    scheduled_at: datetime
    run_id: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleState:
    """Where a schedule is in its fire times: advanced by whichever worker fires it."""

    next_fire_at: datetime | None = None
    """The first fire time not yet handled; ``None`` when none is left (past ``end_at``)."""
    last_fired_at: datetime | None = None
    """The latest fire time handled (a run started, skipped, buffered or missed)."""
    last_run_id: str | None = None
    """The run started last: the one the overlap policy looks at."""
    skipped: int = 0
    """Fire times that started nothing because the previous run was open."""
    missed: int = 0
    """Fire times older than the catch-up window when a worker came to them."""
    buffered_at: datetime | None = None
    """A fire time waiting for the previous run to end (``buffer-one``, ``cancel-other``)."""
    recent: tuple[RecentRun, ...] = field(default=())
    """The last runs started, newest first (at most ``RECENT_KEPT``)."""

    def started(self, fire_time: datetime, run_id: str) -> ScheduleState:
        """This state once ``run_id`` started for ``fire_time``."""
        recent = (RecentRun(scheduled_at=fire_time, run_id=run_id), *self.recent)
        return _replace(self, last_run_id=run_id, recent=recent[:RECENT_KEPT])

    def to_json(self) -> dict[str, Any]:
        return {
            "next_fire_at": _text(self.next_fire_at),
            "last_fired_at": _text(self.last_fired_at),
            "last_run_id": self.last_run_id,
            "skipped": self.skipped,
            "missed": self.missed,
            "buffered_at": _text(self.buffered_at),
            "recent": [[utc_text(r.scheduled_at), r.run_id] for r in self.recent],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ScheduleState:
        return cls(
            next_fire_at=_time(data.get("next_fire_at")),
            last_fired_at=_time(data.get("last_fired_at")),
            last_run_id=data.get("last_run_id"),
            skipped=int(data.get("skipped", 0)),
            missed=int(data.get("missed", 0)),
            buffered_at=_time(data.get("buffered_at")),
            recent=tuple(
                RecentRun(scheduled_at=parse_utc(at), run_id=run_id)
                for at, run_id in data.get("recent", ())
            ),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Schedule:
    """A stored schedule: its definition, its firing state, and the store's bookkeeping."""

    spec: ScheduleSpec
    state: ScheduleState
    due_at: datetime | None
    """When a worker should next look at it (a fire time plus its jitter, a buffered fire
    time's next check, or a claim's end); ``None``: never by itself (paused, or no fire time
    left). Indexed: an idle worker's check is one lookup of the earliest."""
    version: int = 0
    """Bumped by every write; a write names the version it read (optimistic concurrency)."""

    @property
    def schedule_id(self) -> str:
        return self.spec.schedule_id


def due_at(spec: ScheduleSpec, state: ScheduleState, now: datetime) -> datetime | None:
    """When a worker should next look at a schedule in ``state`` (see ``Schedule.due_at``)."""
    if spec.paused:
        return None
    times: list[datetime] = []
    if state.next_fire_at is not None:
        times.append(state.next_fire_at + spec.jitter_for(state.next_fire_at))
    if state.buffered_at is not None:
        times.append(now + BUFFER_POLL)
    return min(times, default=None)


def new_schedule(spec: ScheduleSpec, now: datetime) -> Schedule:
    """A schedule created at ``now``: its first fire time is the first one after now."""
    state = ScheduleState(next_fire_at=spec.next_fire_time(now))
    return Schedule(spec=spec, state=state, due_at=due_at(spec, state, now))


def run_id_for(schedule_id: str, fire_time: datetime) -> str:
    """The run a fire time starts: ``ID@2026-12-04T09:00:00Z``."""
    return f"{schedule_id}@{utc_text(fire_time)}"


def _replace(state: ScheduleState, **changes: Any) -> ScheduleState:
    from dataclasses import replace

    return replace(state, **changes)


def _text(moment: datetime | None) -> str | None:
    return None if moment is None else moment.astimezone(UTC).isoformat()


def _time(text: str | None) -> datetime | None:
    return None if text is None else parse_utc(text)
