"""The ``Schedules`` role in memory: the reference for ``store.schedules_sql``."""

from __future__ import annotations

import dataclasses
import threading
from datetime import datetime

from flow_cli.model.schedule import Schedule


class MemorySchedules:
    """Schedules kept in a dict; each method is atomic under one lock."""

    def __init__(self) -> None:
        self._schedules: dict[str, Schedule] = {}
        self._schedules_lock = threading.Lock()

    def create_schedule(self, schedule: Schedule) -> bool:
        """Store a new schedule at version 1; False if the id is taken."""
        with self._schedules_lock:
            if schedule.schedule_id in self._schedules:
                return False
            self._schedules[schedule.schedule_id] = dataclasses.replace(schedule, version=1)
            return True

    def get_schedule(self, schedule_id: str) -> Schedule | None:
        with self._schedules_lock:
            return self._schedules.get(schedule_id)

    def list_schedules(self) -> list[Schedule]:
        """Every schedule, by id."""
        with self._schedules_lock:
            return [self._schedules[k] for k in sorted(self._schedules)]

    def save_schedule(self, schedule: Schedule) -> bool:
        """Write it if the stored version is still ``schedule.version``."""
        with self._schedules_lock:
            stored = self._schedules.get(schedule.schedule_id)
            if stored is None or stored.version != schedule.version:
                return False
            saved = dataclasses.replace(schedule, version=schedule.version + 1)
            self._schedules[schedule.schedule_id] = saved
            return True

    def delete_schedule(self, schedule_id: str) -> bool:
        with self._schedules_lock:
            return self._schedules.pop(schedule_id, None) is not None

    def claim_schedules(self, now: datetime, claim_until: datetime, limit: int) -> list[Schedule]:
        """Up to ``limit`` schedules due by ``now``, earliest first, claimed until
        ``claim_until``."""
        with self._schedules_lock:
            due = sorted(
                (s for s in self._schedules.values() if s.due_at is not None and s.due_at <= now),
                key=lambda s: (s.due_at, s.schedule_id),
            )[:limit]
            claimed = [
                dataclasses.replace(s, due_at=claim_until, version=s.version + 1) for s in due
            ]
            for schedule in claimed:
                self._schedules[schedule.schedule_id] = schedule
            return claimed

    def next_schedule_due(self) -> datetime | None:
        with self._schedules_lock:
            times = [s.due_at for s in self._schedules.values() if s.due_at is not None]
        return min(times, default=None)
