"""Schedule definitions from the command line and from ``flow.toml``'s ``[schedules.ID]``
tables, checked before anything is opened (bad input writes nothing), and their JSON form.

```toml
[schedules.nightly-report]
workflow = "report"
cron = "0 2 * * *"          # or: every = "15m"
timezone = "Europe/Berlin"
input = { scope = "all" }
overlap = "skip"
catchup_window = "1h"
```
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from flow_cli.cli.filters import parse_duration, parse_time
from flow_cli.errors import ConfigError, InputError
from flow_cli.model.schedule import (
    DEFAULT_CATCHUP,
    Overlap,
    Schedule,
    ScheduleSpec,
    parse_overlap,
    utc_text,
)

TABLE_KEYS = (
    "workflow",
    "cron",
    "every",
    "timezone",
    "input",
    "overlap",
    "catchup_window",
    "jitter",
    "start_at",
    "end_at",
    "paused",
    "note",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SpecOptions:
    """What ``create``/``update`` were given; ``None``: not given."""

    workflow: str | None = None
    cron: str | None = None
    every: str | None = None
    timezone: str | None = None
    input: Any = None
    input_given: bool = False
    overlap: str | None = None
    catchup_window: str | None = None
    jitter: str | None = None
    start_at: str | None = None
    end_at: str | None = None
    paused: bool | None = None
    note: str | None = None


def build_spec(schedule_id: str, given: SpecOptions, base: ScheduleSpec | None) -> ScheduleSpec:
    """The spec ``given`` makes, on top of ``base`` (``update``) or from scratch (``create``).
    Raises ``InputError`` (``ScheduleInvalid``) naming what is wrong and a right example."""
    now = datetime.now(UTC)
    workflow = given.workflow or (base.workflow if base is not None else None)
    if not workflow:
        raise InputError(
            f"schedule {schedule_id!r}: give the workflow to start, e.g. --workflow report"
        )
    cron = given.cron
    every = None if given.every is None else parse_duration(given.every, "--every")
    if base is not None and cron is None and every is None:
        cron, every = base.cron, base.every
    fields: dict[str, Any] = {
        "schedule_id": schedule_id,
        "workflow": workflow,
        "cron": cron,
        "every": every,
        "timezone": _pick(given.timezone, base, "timezone", "UTC"),
        "input": given.input if given.input_given else (base.input if base else None),
        "overlap": (
            parse_overlap(given.overlap, schedule_id)
            if given.overlap is not None
            else (base.overlap if base else Overlap.SKIP)
        ),
        "catchup_window": _duration(
            given.catchup_window, "--catchup-window", base, "catchup_window", DEFAULT_CATCHUP
        ),
        "jitter": _duration(given.jitter, "--jitter", base, "jitter", timedelta(0)),
        "start_at": _moment(given.start_at, "--start-at", now, base, "start_at"),
        "end_at": _moment(given.end_at, "--end-at", now, base, "end_at"),
        "paused": given.paused if given.paused is not None else (base.paused if base else False),
        "note": given.note if given.note is not None else (base.note if base else None),
    }
    return ScheduleSpec(**fields)


def check_options(schedule_id: str, given: SpecOptions) -> None:
    """Raise ``InputError`` for a given value that no schedule could take (an interval, a
    duration, a time or an overlap name), whatever the schedule it would change."""
    now = datetime.now(UTC)
    for text, option in (
        (given.every, "--every"),
        (given.catchup_window, "--catchup-window"),
        (given.jitter, "--jitter"),
    ):
        if text is not None:
            parse_duration(text, option)
    for text, option in ((given.start_at, "--start-at"), (given.end_at, "--end-at")):
        _moment(text, option, now, None, option)
    if given.overlap is not None:
        parse_overlap(given.overlap, schedule_id)


def _pick(value: str | None, base: ScheduleSpec | None, name: str, default: Any) -> Any:
    if value is not None:
        return value
    return getattr(base, name) if base is not None else default


def _duration(
    text: str | None, option: str, base: ScheduleSpec | None, name: str, default: timedelta
) -> timedelta:
    if text is not None:
        return parse_duration(text, option)
    return getattr(base, name) if base is not None else default


def _moment(
    text: str | None, option: str, now: datetime, base: ScheduleSpec | None, name: str
) -> datetime | None:
    if text is not None:
        return None if text.strip().lower() in ("", "none") else parse_time(text, option, now)
    return getattr(base, name) if base is not None else None


def read_schedule_tables(path: Path | None) -> list[ScheduleSpec]:
    """The ``[schedules.ID]`` tables of the config file (none without one). Raises
    ``ConfigError`` or ``InputError`` naming the table and what is wrong."""
    if path is None:
        raise ConfigError(
            "No flow.toml found: `flow schedule apply` makes the database's schedules match "
            "its [schedules.ID] tables, e.g. [schedules.nightly] with "
            'workflow = "report" and cron = "0 2 * * *".'
        )
    import tomllib

    document = tomllib.loads(path.read_text(encoding="utf-8"))
    tables = document.get("schedules", {})
    if not isinstance(tables, dict):
        raise ConfigError(f"{path}: [schedules] must hold tables, e.g. [schedules.nightly].")
    specs: list[ScheduleSpec] = []
    for schedule_id, table in tables.items():
        if not isinstance(table, dict):
            raise ConfigError(f"{path}: schedules.{schedule_id} must be a table.")
        unknown = sorted(k for k in table if k not in TABLE_KEYS)
        if unknown:
            raise ConfigError(
                f"{path}: [schedules.{schedule_id}] has unknown keys {', '.join(unknown)} "
                f"(known: {', '.join(TABLE_KEYS)})."
            )
        texts = {
            k: _text(path, schedule_id, k, table.get(k))
            for k in TABLE_KEYS
            if k not in ("input", "paused")
        }
        paused = table.get("paused", False)
        if not isinstance(paused, bool):
            raise ConfigError(f"{path}: [schedules.{schedule_id}] paused must be true or false.")
        given = SpecOptions(
            workflow=texts["workflow"],
            cron=texts["cron"],
            every=texts["every"],
            timezone=texts["timezone"],
            input=table.get("input"),
            input_given=True,
            overlap=texts["overlap"],
            catchup_window=texts["catchup_window"],
            jitter=texts["jitter"],
            start_at=texts["start_at"],
            end_at=texts["end_at"],
            paused=paused,
            note=texts["note"],
        )
        specs.append(build_spec(str(schedule_id), given, None))
    return specs


def _text(path: Path, schedule_id: str, key: str, value: Any) -> str | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value.isoformat()
    if not isinstance(value, str):
        raise ConfigError(f"{path}: [schedules.{schedule_id}] {key} must be a string.")
    return value


def duration_text(value: timedelta | None) -> str | None:
    """``1h30m``, ``15m``, ``45s``: what ``--every`` and friends take back."""
    if value is None:
        return None
    seconds = int(value.total_seconds())
    if seconds == 0:
        return "0s"
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if seconds >= size:
            parts.append(f"{seconds // size}{unit}")
            seconds %= size
    return "".join(parts)


def schedule_json(
    schedule: Schedule, next_fire_times: list[datetime], recent: list[dict[str, Any]] | None
) -> dict[str, Any]:
    """``flow schedule show --json`` (``list --json``: without ``recent``)."""
    spec, state = schedule.spec, schedule.state
    row: dict[str, Any] = {
        "schedule_id": spec.schedule_id,
        "workflow": spec.workflow,
        "cron": spec.cron,
        "every": duration_text(spec.every),
        "timezone": spec.timezone,
        "input": spec.input,
        "overlap": spec.overlap.value,
        "paused": spec.paused,
        "note": spec.note,
        "next_fire_times": [utc_text(t) for t in next_fire_times],
    }
    if recent is not None:
        row["recent"] = recent
    row.update(
        {
            "skipped": state.skipped,
            "missed": state.missed,
            "catchup_window": duration_text(spec.catchup_window),
            "jitter": duration_text(spec.jitter),
            "start_at": None if spec.start_at is None else utc_text(spec.start_at),
            "end_at": None if spec.end_at is None else utc_text(spec.end_at),
            "last_fired_at": None if state.last_fired_at is None else utc_text(state.last_fired_at),
            "buffered_at": None if state.buffered_at is None else utc_text(state.buffered_at),
        }
    )
    return row
