"""The ``Limits`` role in memory: the reference for ``store.limits_sql``."""

from __future__ import annotations

import threading
from abc import abstractmethod
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from flow_cli.model.limits import DeclaredLimit, LimitState, Rate, free_slots, parse_target
from flow_cli.model.status import TERMINAL_STATUSES, RunStatus
from flow_cli.store.limits_sql import THROTTLE_POLL, limit_key
from flow_cli.store.records import RunRecord, StepTask

OPEN = {s.value for s in RunStatus if s not in TERMINAL_STATUSES}


class LimitedRun(Protocol):
    """What the memory store's run shows a limit: its index row and its events."""

    @property
    def row(self) -> RunRecord: ...

    @property
    def events(self) -> Sequence[LimitedEvent]: ...


class LimitedEvent(Protocol):
    @property
    def data(self) -> str: ...


@dataclass(slots=True)
class _Limit:
    code: DeclaredLimit
    overridden: bool = False
    concurrency: int | None = None
    rate: Rate | None = None

    @property
    def limited(self) -> bool:
        return self.concurrency is not None or self.rate is not None


class MemoryLimits:
    """Limits kept in dicts; callers hold the store's lock (``_limits_lock``)."""

    _lock: threading.RLock

    def __init__(self) -> None:
        self._limits: dict[tuple[str, str], _Limit] = {}
        self._starts: dict[str, list[datetime]] = {}
        self._slots: dict[str, str] = {}
        """Run id → the key of the slot its admission took (kept after it ends: not counted)."""
        self._throttled_until: datetime | None = None

    @abstractmethod
    def _limit_tasks(self) -> Iterable[tuple[tuple[str, str], StepTask]]:
        """The store's step tasks, by (run id, step id)."""

    @abstractmethod
    def _limit_runs(self) -> Iterable[LimitedRun]:
        """The store's runs."""

    def declare_limits(self, limits: Sequence[DeclaredLimit]) -> None:
        """Record what code declares (source ``code``); an override in place stays in effect."""
        with self._lock:
            for limit in limits:
                key = parse_target(limit.target)
                held = self._limits.get(key)
                if held is None:
                    held = self._limits[key] = _Limit(code=limit)
                held.code = limit
                if not held.overridden:
                    held.concurrency, held.rate = limit.concurrency, limit.rate

    def override_limit(self, target: str, concurrency: int | None, rate: Rate | None) -> bool:
        """Put ``concurrency`` and/or ``rate`` in effect (source ``override``); False when the
        target is unknown."""
        with self._lock:
            held = self._limits.get(parse_target(target))
            if held is None:
                return False
            held.overridden = True
            if concurrency is not None:
                held.concurrency = concurrency
            if rate is not None:
                held.rate = rate
            return True

    def clear_override(self, target: str) -> bool:
        """Put the code's values back (source ``code``); False when the target is unknown."""
        with self._lock:
            held = self._limits.get(parse_target(target))
            if held is None:
                return False
            held.overridden = False
            held.concurrency, held.rate = held.code.concurrency, held.code.rate
            return True

    def known_limit(self, target: str) -> bool:
        """Whether some worker declared ``target``."""
        with self._lock:
            return parse_target(target) in self._limits

    def limit_states(self, now: datetime) -> list[LimitState]:
        """Every limit in effect, by target, with its use at ``now``."""
        with self._lock:
            found = []
            tasks = [task for _, task in self._limit_tasks()]
            for (kind, name), held in sorted(self._limits.items()):
                if not held.limited:
                    continue
                mine = [t for t in tasks if kind == "step" and t.name == name]
                in_use = sum(1 for t in mine if t.owner and t.available_at > now)
                waiting = sum(1 for t in mine if t.available_at <= now)
                if kind == "workflow":
                    runs = [r for r in self._limit_runs() if r.row.workflow == name]
                    in_use = sum(
                        1
                        for r in runs
                        if r.row.run_id in self._slots and r.row.status.value in OPEN
                    )
                    waiting = sum(
                        1
                        for r in runs
                        if r.row.status is RunStatus.PENDING and r.row.run_id not in self._slots
                    )
                found.append(
                    LimitState(
                        target=f"{kind}:{name}",
                        concurrency=held.concurrency,
                        rate=held.rate,
                        in_use=in_use,
                        waiting=waiting,
                        source="override" if held.overridden else "code",
                    )
                )
            return found

    def limited_targets(self) -> frozenset[str]:
        """The targets (``step:NAME``, ``workflow:NAME``) a limit is in effect for."""
        with self._lock:
            return frozenset(f"{k}:{n}" for (k, n), held in self._limits.items() if held.limited)

    def limited_steps(self) -> frozenset[str]:
        """The names of the steps a limit is in effect for."""
        with self._lock:
            return frozenset(
                n for (k, n), held in self._limits.items() if k == "step" and held.limited
            )

    def limited_workflows(self) -> frozenset[str]:
        """The names of the workflows a limit is in effect for."""
        with self._lock:
            return frozenset(
                n for (k, n), held in self._limits.items() if k == "workflow" and held.limited
            )

    def _lease_limited_runs(
        self, runs: Iterable[LimitedRun], builds: set[str], now: datetime, room: int
    ) -> list[LimitedRun]:
        """``Pending`` runs of limited workflows to lease for their first decision, as their
        limits leave slots, in start order per key (``limits_sql._lease_limited_runs``); each
        one admitted holds its slot until it ends."""
        chosen: list[LimitedRun] = []
        by_workflow: dict[str, list[LimitedRun]] = {}
        for run in runs:
            by_workflow.setdefault(run.row.workflow, []).append(run)
        for name in sorted(self.limited_workflows()):
            held = self._limits[("workflow", name)]
            mine = sorted(by_workflow.get(name, []), key=lambda r: (r.row.created_at, r.row.run_id))
            used: dict[str, int] = {}
            for run in mine:
                key = self._slots.get(run.row.run_id)
                if key is not None and run.row.status.value in OPEN:
                    used[key] = used.get(key, 0) + 1
            for run in mine:
                if len(chosen) >= room or run.row.status is not RunStatus.PENDING:
                    continue
                due = run.row.decide_at is not None and run.row.decide_at <= now
                if run.row.run_id in self._slots:
                    if due and run.row.build_id in builds:
                        chosen.append(run)
                    continue
                key = limit_key(run.events[0].data, held.code.key)
                if used.get(key, 0) >= (held.concurrency or 0):
                    self._throttled_until = now + THROTTLE_POLL
                    continue
                if due and run.row.build_id in builds:
                    used[key] = used.get(key, 0) + 1
                    self._slots[run.row.run_id] = key
                    chosen.append(run)
        return chosen

    def _limit_held(self, run_id: str) -> bool:
        """Whether a pause holds the run (the store says): its ready attempts wait."""
        return False

    def _limit_priority(self, run_id: str) -> int:
        """The run's priority (the store says): its ready attempts are taken by it, then age."""
        return 5

    @abstractmethod
    def _limit_build(self, run_id: str) -> str:
        """The build the run is pinned to (the store says): only its workers lease its tasks."""

    def _lease_limited(
        self, builds: set[str], now: datetime, room: int
    ) -> list[tuple[tuple[str, str], StepTask]]:
        """Ready tasks of limited steps that their limits leave slots for, by their runs'
        priority then oldest first per step, their starts logged; the caller leases them
        (``limits_sql._lease_limited``)."""
        self._throttled_until = None
        taken: list[tuple[tuple[str, str], StepTask]] = []
        tasks = list(self._limit_tasks())
        for name in sorted(self.limited_steps()):
            if len(taken) >= room:
                break
            held = self._limits[("step", name)]
            mine = [(key, t) for key, t in tasks if t.name == name]
            ours = [(key, t) for key, t in mine if self._limit_build(key[0]) in builds]
            ready = sorted(
                ((t.available_at, key, t) for key, t in ours),
                key=lambda item: (self._limit_priority(item[1][0]), item[0], item[1]),
            )
            ready = [item for item in ready if item[0] <= now and not self._limit_held(item[1][0])][
                : room - len(taken)
            ]
            if not ready:
                continue
            in_flight = sum(1 for _, t in mine if t.owner and t.available_at > now)
            starts = self._starts.setdefault(name, [])
            if held.rate is not None:
                window = now - timedelta(seconds=held.rate.seconds)
                starts[:] = [at for at in starts if at > window]
            free = free_slots(held.concurrency, held.rate, in_flight, len(starts))
            take = ready if free is None else ready[:free]
            if len(take) < len(ready):
                self._throttled_until = now + THROTTLE_POLL
            for _, key, task in take:
                taken.append((key, task))
                if held.rate is not None:
                    starts.append(now)
        return taken

    def _throttled_due(self, due: datetime | None) -> datetime | None:
        held, self._throttled_until = self._throttled_until, None  # said once per lease
        if held is None:
            return due
        return held if due is None or held < due else due
