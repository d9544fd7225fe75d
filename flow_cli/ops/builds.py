"""``flow builds``: what each build id still carries, and whether it can be retired.

A build is known from the runs pinned to it, from the workers registered as hosting it (live
or gone) and from the configuration (the build new runs start on). It is ``retirable`` when no
open run is pinned to it: its code can be removed from the fleet without stranding a run.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from flow_cli.store.protocol import BuildUsage, WorkerInfo


@dataclass(frozen=True, slots=True, kw_only=True)
class BuildReport(BuildUsage):
    """A build as ``flow builds`` reports it: what the runs index knows of it (``BuildUsage``:
    its open runs per status, the oldest, their patch markers) and the workers hosting it."""

    workers: list[str]
    """Live workers hosting the build, by worker id."""

    @property
    def open_total(self) -> int:
        return sum(self.open.values())

    @property
    def retirable(self) -> bool:
        """No open run is pinned to the build."""
        return not self.open

    def to_json(self) -> dict[str, object]:
        return {
            "build_id": self.build_id,
            "open": dict(self.open),
            "oldest_open_run": self.oldest_open_run,
            "oldest_open_at": None
            if self.oldest_open_at is None
            else self.oldest_open_at.isoformat(),
            "workers": list(self.workers),
            "patches": list(self.patches),
            "retirable": self.retirable,
        }


class BuildReads(Protocol):
    """What ``build_reports`` reads: an ``Engine`` (or a store, in tests)."""

    def build_usage(self) -> list[BuildUsage]: ...

    def list_workers(self) -> list[WorkerInfo]: ...


def build_reports(
    store: BuildReads, now: datetime, configured: Iterable[str] = ()
) -> list[BuildReport]:
    """Every known build id, sorted, with its open runs and live hosts."""
    usage = {u.build_id: u for u in store.build_usage()}
    hosts: dict[str, list[str]] = {}
    for worker in store.list_workers():
        for build in worker.builds:
            hosts.setdefault(build, [])
            if worker.live(now):
                hosts[build].append(worker.worker_id)
    reports = []
    for build_id in sorted({*usage, *hosts, *configured}):
        used = usage.get(build_id)
        reports.append(
            BuildReport(
                build_id=build_id,
                open=dict(used.open) if used else {},
                oldest_open_run=used.oldest_open_run if used else None,
                oldest_open_at=used.oldest_open_at if used else None,
                workers=sorted(hosts.get(build_id, [])),
                patches=used.patches if used else (),
            )
        )
    return reports


__all__ = ["BuildReport", "build_reports"]
