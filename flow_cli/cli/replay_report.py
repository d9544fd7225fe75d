"""How ``flow replay-check`` reports divergences in a CI log.

- Identical divergences (identity, field, recorded → produced) are grouped: one row per group
  with the number of runs and a few sample runs, instead of one row per run.
- Both sides speak the history's vocabulary: a produced command (``ScheduleStep``) is named by
  the event it would record (``step_scheduled``).
- Long values are shown as a window around the first character where the two sides differ, so
  the difference stays visible at 120 columns.
- ``--format github`` prints one ``::error`` workflow command per group (GitHub Actions).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from dataclasses import field as dataclass_field
from typing import TYPE_CHECKING, Any

from flow_cli.model.jsonval import canonical, json_fields

if TYPE_CHECKING:
    from rich.console import RenderableType

    from flow_cli.engine.replay_check import Divergence, ReplayResult

COMMAND_EVENTS = {
    "ScheduleStep": "step_scheduled",
    "ScheduleSteps": "step_scheduled",
    "WaitUntil": "wait_started",
    "WaitForSignal": "signal_wait_started",
    "CreateHook": "hook_created",
    "StartChild": "child_scheduled",
    "StartChildren": "child_scheduled",
    "Complete": "run_completed",
    "Fail": "run_failed",
    "Cancelled": "run_cancelled",
    "ContinueAsNew": "run_continued_as_new",
}
"""Command class → the event key it records, so both sides read in one vocabulary."""

VALUE_WIDTH = 30
"""Characters of each side shown in the table: three such columns and the rest fit 120."""
SAMPLES = 3


def in_event_terms(value: Any) -> Any:
    """``{"ScheduleStep": {...}}`` → ``{"step_scheduled": {...}}``; other values unchanged."""
    if isinstance(value, dict) and len(value) == 1:
        ((key, inner),) = value.items()
        if key in COMMAND_EVENTS:
            return {COMMAND_EVENTS[key]: inner}
    return value


def compact(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


def first_difference(a: str, b: str) -> int:
    """Index of the first character where ``a`` and ``b`` differ (the shorter length if none)."""
    for index, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return index
    return min(len(a), len(b))


def window(text: str, at: int, width: int = VALUE_WIDTH) -> str:
    """``width`` characters of ``text`` around ``at``, with ``…`` where text was left out."""
    if len(text) <= width:
        return text
    start = max(0, min(at - width // 3, len(text) - width))
    piece = text[start : start + width]
    if start > 0:
        piece = "…" + piece[1:]
    if start + width < len(text):
        piece = piece[:-1] + "…"
    return piece


@dataclass(slots=True)
class Group:
    """Identical divergences found in several runs."""

    identity: str
    field: str
    recorded: Any
    produced: Any
    sequence: int
    runs: list[str] = dataclass_field(default_factory=list)

    def sides(self, width: int = VALUE_WIDTH) -> tuple[str, str]:
        recorded, produced = compact(self.recorded), compact(self.produced)
        at = first_difference(recorded, produced)
        return window(recorded, at, width), window(produced, at, width)

    def to_json(self) -> dict[str, Any]:
        return {
            **json_fields(self, "identity", "field", "recorded", "produced"),
            "runs": len(self.runs),
            "sample_runs": self.runs[:SAMPLES],
        }


def group(results: Sequence[ReplayResult]) -> list[Group]:
    """Divergences grouped by (identity, field, recorded, produced), largest group first."""
    groups: dict[str, Group] = {}
    for result in results:
        for d in result.divergences:
            g = _group_of(groups, d)
            if result.run_id not in g.runs:
                g.runs.append(result.run_id)
    return sorted(groups.values(), key=lambda g: (-len(g.runs), g.identity, g.field))


def _group_of(groups: dict[str, Group], d: Divergence) -> Group:
    recorded, produced = in_event_terms(d.recorded), in_event_terms(d.produced)
    key = canonical([d.identity, d.field, recorded, produced])
    if key not in groups:
        groups[key] = Group(d.identity, d.field, recorded, produced, d.sequence)
    return groups[key]


def samples(runs: Sequence[str]) -> str:
    shown = ", ".join(runs[:SAMPLES])
    return shown + (f" +{len(runs) - SAMPLES}" if len(runs) > SAMPLES else "")


def table(groups: Sequence[Group]) -> RenderableType:
    from rich.text import Text

    from flow_cli.cli.render import _table
    from flow_cli.model.names import escape_controls

    grid = _table("divergences")
    grid.add_column("runs", justify="right", no_wrap=True)
    grid.add_column("identity", overflow="fold")
    grid.add_column("field", overflow="fold")
    grid.add_column("recorded", overflow="fold", style="green", min_width=VALUE_WIDTH)
    grid.add_column("produced", overflow="fold", style="red", min_width=VALUE_WIDTH)
    grid.add_column("sample runs", overflow="fold")
    for g in groups:
        recorded, produced = g.sides()
        grid.add_row(
            str(len(g.runs)),
            Text(escape_controls(g.identity)),
            Text(escape_controls(g.field)),
            Text(escape_controls(recorded)),
            Text(escape_controls(produced)),
            Text(escape_controls(samples(g.runs))),
        )
    return grid


def github_file_error(path: str, error: str) -> str:
    """The annotation of a file that could not be read."""
    return f"::error file={_escape_property(path)},title=replay-check::{_escape(error)}"


def _escape(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape(text).replace(":", "%3A").replace(",", "%2C")


def github(groups: Sequence[Group], build: str, files: dict[str, str]) -> list[str]:
    """One ``::error`` workflow command per group (``files``: run id → the file it came from)."""
    lines = []
    for g in groups:
        recorded, produced = g.sides(80)
        runs = "run diverges" if len(g.runs) == 1 else "runs diverge"
        title = f"replay-check: {len(g.runs)} {runs} from build {build}"
        where = files.get(g.runs[0])
        props = f"title={_escape_property(title)}"
        if where is not None:
            props = f"file={_escape_property(where)},{props}"
        message = (
            f"{g.identity} {g.field} (event {g.sequence}): recorded {recorded} produced "
            f"{produced}; runs {samples(g.runs)}"
        )
        lines.append(f"::error {props}::{_escape(message)}")
    return lines
