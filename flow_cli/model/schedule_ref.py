"""What a scheduled run's spec records of its schedule, apart from schedules themselves: every
run's spec is decoded by every command, and ``model.schedule`` (cron, fire times) is not small."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from flow_cli.model.clock import parse_utc


def utc_text(moment: datetime) -> str:
    """``2026-12-04T09:00:00Z``: UTC, ISO 8601 to the second (run ids, ``--json``)."""
    return moment.astimezone(UTC).replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True, kw_only=True)
class ScheduleRef:
    """What a scheduled run's spec records (``run_started.data.spec.schedule``)."""

    schedule_id: str
    scheduled_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {"id": self.schedule_id, "scheduled_at": utc_text(self.scheduled_at)}

    @classmethod
    def from_json(cls, data: Any) -> ScheduleRef | None:
        if not isinstance(data, dict):
            return None
        return cls(schedule_id=str(data["id"]), scheduled_at=parse_utc(str(data["scheduled_at"])))
