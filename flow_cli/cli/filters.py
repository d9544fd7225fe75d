"""The run filters of DESIGN §6.1, shared by ``flow runs``, ``flow count`` and the bulk verbs.

``@with_filters`` adds the filter options to a command's signature (so Typer shows them in its
help like any other option) and hands the command one ``FilterArgs`` in their place. Parsing
(statuses, times, ages, durations, waiting-on kinds) happens here, before any database is opened.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, fields
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from flow_cli.cli.bundles import bundled, optional_text
from flow_cli.errors import InputError
from flow_cli.model.status import RunStatus

if TYPE_CHECKING:
    from flow_cli.store.protocol import RunFilter

F = TypeVar("F", bound=Callable[..., Any])

_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|[smhdw])")

MAX_DURATION = timedelta(days=36525)
"""The longest duration an option takes (100 years): far beyond any real wait or age, and far
inside what dates, timeouts and the databases can hold (an age subtracted from now stays a
valid date; a timeout stays below ``threading.TIMEOUT_MAX``)."""
MAX_LIMIT = 1_000_000_000
"""The largest ``--limit``: more rows than any listing can print, and a 64-bit integer in SQL."""


class _TooLong(InputError):
    """A duration beyond ``MAX_DURATION``: said as such, also where a time was expected."""


def parse_duration(text: str, option: str) -> timedelta:
    """``90s``, ``15m``, ``2h``, ``3d``, ``1w``, ``1h30m`` or a bare number of seconds, at most
    ``MAX_DURATION``. Raises ``InputError`` with one sentence (``nan``, ``inf``, ``1e22s``)."""
    value = text.strip().lower()
    try:
        seconds = float(value)
    except ValueError:
        parts = _DURATION.findall(value)
        if not parts or "".join(n + u for n, u in parts) != value:
            raise InputError(
                f"{option} {text!r} is not a duration; write e.g. 90s, 15m, 2h, 3d or 1h30m."
            ) from None
        seconds = sum(float(n) * (0.001 if u == "ms" else _UNITS[u]) for n, u in parts)
    if math.isnan(seconds):
        raise InputError(
            f"{option} {text!r} is not a duration; write e.g. 90s, 15m, 2h, 3d or 1h30m."
        )
    if seconds < 0:
        raise InputError(f"{option} {text!r} is negative; give a duration such as 2h.")
    if seconds > MAX_DURATION.total_seconds():  # inf, 1e22s, 999999999999d
        raise _TooLong(
            f"{option} {text!r} is too long; give at most {MAX_DURATION.days}d (100 years)."
        )
    return timedelta(seconds=seconds)


def parse_time(text: str, option: str, now: datetime) -> datetime:
    """An ISO 8601 time (naive means UTC) or an age such as ``2h`` (that long before now)."""
    value = text.strip()
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        try:
            return now - parse_duration(value, option)
        except _TooLong:
            raise
        except InputError:
            raise InputError(
                f"{option} {text!r} is neither an ISO 8601 time (2026-12-01T09:00:00Z) nor an "
                "age such as 2h or 3d."
            ) from None
    try:
        return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00:00+01:00 is before the first representable time
        raise InputError(
            f"{option} {text!r} is out of range; give a time between the years 1 and 9999."
        ) from None


def parse_statuses(values: list[str]) -> tuple[RunStatus, ...]:
    """``--status`` values, repeatable and comma lists, any case."""
    by_name = {s.value.lower(): s for s in RunStatus}
    found: list[RunStatus] = []
    for value in values:
        for name in (part.strip() for part in value.split(",")):
            if not name:
                continue
            status = by_name.get(name.lower())
            if status is None:
                known = ", ".join(s.value for s in RunStatus)
                raise InputError(f"--status {name!r} is not one of {known}.")
            if status not in found:
                found.append(status)
    return tuple(found)


def complete_status(incomplete: str) -> list[str]:
    """Shell completion for ``--status``."""
    return [s.value for s in RunStatus if s.value.lower().startswith(incomplete.lower())]


def parse_waiting_on(value: str) -> str:
    from flow_cli.store.protocol import WAITING_KINDS

    kind, sep, ident = value.partition(":")
    if kind not in WAITING_KINDS or (sep and not ident):
        raise InputError(
            f"--waiting-on {value!r}: write KIND or KIND:ID with KIND one of "
            f"{', '.join(WAITING_KINDS)} (e.g. signal:shipped, hook:approval)."
        )
    return value


def parse_attribute_filter(values: list[str] | None) -> tuple[tuple[str, str], ...]:
    """``--attr KEY=VALUE`` values (repeatable, all must hold) as the store compares them:
    (key, the value's JSON text). The value is JSON when it reads as a JSON string, number or
    boolean, else the text as written (``flow_cli.model.attributes.parse_attribute``)."""
    from flow_cli.model.attributes import attribute_text, parse_attribute

    found: list[tuple[str, str]] = []
    for value in values or ():
        key, parsed = parse_attribute(value)
        pair = (key, attribute_text(parsed))
        if pair not in found:
            found.append(pair)
    return tuple(found)


@dataclass(frozen=True, slots=True)
class FilterArgs:
    """The filter options as given on the command line."""

    status: list[str]
    workflow: str | None
    build_id: str | None
    since: str | None
    until: str | None
    failing: bool
    waiting_on: str | None
    idle_for: str | None
    top_level: bool
    error_type: str | None
    attr: list[str]
    limit: int | None
    after: str | None

    @property
    def selects(self) -> bool:
        """Whether any condition was given (``--limit``/``--after`` alone select nothing)."""
        return any(getattr(self, name) for name in _SELECTING)

    def to_filter(self, now: datetime | None = None) -> RunFilter:
        """The store's ``RunFilter``. Raises ``InputError`` with one sentence."""
        from flow_cli.store.protocol import RunFilter

        at = now or datetime.now(UTC)
        idle = None if self.idle_for is None else at - parse_duration(self.idle_for, "--idle-for")
        return RunFilter(
            statuses=parse_statuses(self.status),
            workflow=self.workflow,
            build_id=self.build_id,
            since=None if self.since is None else parse_time(self.since, "--since", at),
            until=None if self.until is None else parse_time(self.until, "--until", at),
            failing=self.failing,
            waiting_on=None if self.waiting_on is None else parse_waiting_on(self.waiting_on),
            idle_since=idle,
            top_level=self.top_level,
            error_type=self.error_type,
            attributes=parse_attribute_filter(self.attr),
            limit=self.limit or None,  # --limit 0: no limit
            after=self.after,
        )


_SELECTING = tuple(f.name for f in fields(FilterArgs) if f.name not in ("limit", "after"))
"""The fields of ``FilterArgs`` that select runs (``--limit``/``--after`` alone select none)."""


_OPTIONS: dict[str, tuple[Any, Any]] = {
    "status": (
        Annotated[
            list[str],
            typer.Option(
                "--status",
                metavar="S",
                autocompletion=complete_status,
                help="Only runs with this status (repeatable, or a comma list; any case): "
                "Pending, Running, Suspended, Cancelling, Completed, Failed, Cancelled, "
                "ContinuedAsNew.",
                show_default=False,
            ),
        ],
        [],
    ),
    "workflow": optional_text("--workflow", "W", "Only runs of this workflow."),
    "build_id": optional_text("--build-id", "B", "Only runs pinned to this build."),
    "since": optional_text(
        "--since",
        "T",
        "Only runs started at or after T: ISO 8601, or an age such as 2h, 3d.",
    ),
    "until": optional_text(
        "--until",
        "T",
        "Only runs started before T: ISO 8601, or an age such as 2h, 3d.",
    ),
    "failing": (
        Annotated[
            bool,
            typer.Option("--failing", help="Only runs whose last decision failed."),
        ],
        False,
    ),
    "waiting_on": optional_text(
        "--waiting-on",
        "KIND[:ID]",
        "Only open runs waiting on a signal (by name), hook, timer, step or child "
        "(by id), e.g. signal:shipped, hook, step:charge.",
    ),
    "idle_for": optional_text(
        "--idle-for",
        "DURATION",
        "Only runs with no event for at least DURATION (e.g. 30m, 2h).",
    ),
    "top_level": (
        Annotated[
            bool,
            typer.Option("--top-level", help="Only runs that are not children of another run."),
        ],
        False,
    ),
    "error_type": optional_text(
        "--error-type",
        "TYPE",
        "Only runs that failed, or whose last decision failed, with error type TYPE "
        "(e.g. KeyError, ShippingFailed: the reason column of flow runs).",
    ),
    "attr": (
        Annotated[
            list[str],
            typer.Option(
                "--attr",
                metavar="KEY=VALUE",
                help="Only runs with search attribute KEY equal to VALUE (repeatable; all must "
                "hold). VALUE is JSON when it reads as a string, number or boolean (n=5, "
                "ok=true), else text as written (customer=acme).",
                show_default=False,
            ),
        ],
        [],
    ),
    "limit": (
        Annotated[
            int | None,
            typer.Option(
                "--limit",
                metavar="N",
                min=0,
                max=MAX_LIMIT,
                help="At most N runs (newest first); 0 for no limit.",
            ),
        ],
        None,
    ),
    "after": optional_text(
        "--after",
        "RUN_ID",
        "Cursor: only runs listed after RUN_ID (the last id of the previous page).",
    ),
}


def with_filters(command: F) -> F:
    """Add the filter options to ``command``, which receives them as ``filters: FilterArgs``."""
    adding: Callable[[F], F] = bundled("filters", _OPTIONS, FilterArgs)
    return adding(command)
