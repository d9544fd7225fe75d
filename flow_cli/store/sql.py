"""What the SQLite and PostgreSQL stores share: the run index's row changes as SQL.

A ``Dialect`` names the few things that differ (the placeholder, the casts PostgreSQL needs to
type a parameter that may be NULL, how a time is sent); everything else is written once here.
"""

from __future__ import annotations

import json
from abc import abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flow_cli.model.jsonval import JsonValue
from flow_cli.model.status import TERMINAL_STATUSES, RunStatus
from flow_cli.store.index import RowChanges
from flow_cli.store.protocol import (
    KEEP,
    HookListing,
    HookRecord,
    Keep,
    RunError,
    RunFilter,
    WorkerInfo,
    waiting_needle,
)

OPEN_LIST = ", ".join(f"'{s.value}'" for s in RunStatus if s not in TERMINAL_STATUSES)
TERMINAL_LIST = ", ".join(f"'{s.value}'" for s in sorted(TERMINAL_STATUSES))
"""The open and the ended statuses as SQL literals, for ``status IN (...)``."""


@dataclass(frozen=True, slots=True)
class Dialect:
    """How one SQL backend spells what ``sql`` renders."""

    param: str
    """The placeholder: ``?`` or ``%s``."""
    text_param: str
    """A text placeholder whose type a NULL would leave open."""
    time_param: str
    """A timestamp placeholder whose type a NULL would leave open."""
    time: Callable[[datetime], Any]
    """A time as the backend stores it."""
    named: Callable[[str], str]
    """A named placeholder: ``:name`` or ``%(name)s``."""
    position: str
    """The function that finds a string in another: ``instr`` or ``strpos``."""
    build_key: str
    """The expression of the runs' build index (SQLite indexes an expression)."""
    created_order: str
    """The column that orders rows (runs, hooks) created at the same instant."""
    false: str
    """A false boolean column's value, spelled as the backend's partial indexes spell it."""
    json_value: Callable[[Any], Any]
    """A JSON column's value as read back (SQLite holds the text)."""

    def time_or_none(self, value: datetime | None) -> Any:
        return None if value is None else self.time(value)


class SQLRole:
    """The base of a store role written once in SQL (``SQLSchedules``, ``SQLPauses``,
    ``SQLLimits``, ``SQLRetention``): what each needs of its store, which the SQLite and
    PostgreSQL stores each provide once for all of them."""

    _sql_dialect: Dialect

    @abstractmethod
    def _sql_write(self) -> AbstractContextManager[Any]:
        """One write transaction (committed when the block ends without an error)."""

    @abstractmethod
    def _sql_read(self) -> AbstractContextManager[Any]:
        """A connection for reading."""

    @abstractmethod
    def _sql_time(self, value: Any) -> datetime:
        """A stored time, decoded."""


def run_sets(
    changes: RowChanges,
    dialect: Dialect,
    stamp: Any,
    last_sequence: int,
    *,
    status: bool = True,
) -> tuple[tuple[str, ...], list[Any]]:
    """The ``SET`` items of the runs row after a write, and their parameters; ``stamp`` is
    the write's time as the backend stores it (``Dialect.time``). ``status=False`` leaves the
    status out, for a backend that sets it apart only when it changes.

    The items depend only on which columns change, so a backend may cache the statement by
    them (PostgreSQL prepares it).
    """
    p = dialect.param
    sets: list[str] = [f"updated_at = {p}", f"last_sequence = {p}"]
    params: list[Any] = [stamp, last_sequence]
    if status:
        sets.insert(0, f"status = {p}")
        params.insert(0, changes.status.value)
    if changes.decide_at is not KEEP:
        # A new decision time releases the run's lease: whoever decides next leases afresh.
        sets.append(f"decide_at = {p}, lease_owner = NULL")
        params.append(dialect.time_or_none(changes.decide_at))
    if changes.failing is not KEEP:
        # SET reads the row as it was: the time is kept while the run goes on failing
        # (``RowChanges.failing_since``).
        sets.append(
            f"failing = {p}, failing_since = CASE WHEN {dialect.text_param} IS NULL THEN NULL "
            f"WHEN failing IS NULL THEN {dialect.time_param} ELSE failing_since END"
        )
        params.extend([changes.failing, changes.failing, stamp])
    if changes.waiting_on is not KEEP:
        sets.append(f"waiting_on = {p}")
        params.append(changes.waiting_on)
    if changes.build_id is not KEEP:
        sets.append(f"build_id = {p}")
        params.append(changes.build_id)
    if changes.error is not KEEP:
        sets.append(f"error_type = {p}, error = {p}")
        params.extend(error_values(changes.error))
    return tuple(sets), params


def error_values(error: RunError | Keep | None) -> tuple[str | None, str | None]:
    """The ``error_type`` and ``error`` columns of a run's error (``None`` when it has none)."""
    if error is KEEP or error is None:
        return None, None
    return error.error_type, error.text


def run_filter(where: RunFilter, dialect: Dialect) -> tuple[list[str], dict[str, Any]]:
    """The conditions of a run filter (cursor and limit aside) and their named parameters."""
    n = dialect.named
    conditions: list[str] = []
    params: dict[str, Any] = {}
    if where.statuses:
        names = [f"status{i}" for i in range(len(where.statuses))]
        conditions.append(f"status IN ({', '.join(n(name) for name in names)})")
        params.update(zip(names, (status.value for status in where.statuses), strict=True))
    # (filter field, column, operator, is a time): a field set to a value is one comparison.
    compared = (
        ("workflow", "workflow", "=", False),
        ("build_id", dialect.build_key, "=", False),
        ("since", "created_at", ">=", True),
        ("until", "created_at", "<", True),
        ("idle_since", "updated_at", "<=", True),
        ("error_type", "error_type", "=", False),
    )
    for name, column, operator, is_time in compared:
        value = getattr(where, name)
        if value is not None:
            conditions.append(f"{column} {operator} {n(name)}")
            params[name] = dialect.time(value) if is_time else value
    if where.failing:
        conditions.append("failing IS NOT NULL")
    if where.waiting_on is not None:
        # Entries are space-separated: padding both ends makes a whole-entry match.
        conditions.append(
            f"waiting_on IS NOT NULL AND {dialect.position}(' ' || waiting_on || ' ', "
            f"{n('needle')}) > 0"
        )
        params["needle"] = waiting_needle(where.waiting_on)
    if where.top_level:
        conditions.append("parent_run_id IS NULL")
    for i, (key, value) in enumerate(where.attributes):
        # Served by run_attributes_value (key, value, run_id): one probe per attribute.
        conditions.append(
            f"run_id IN (SELECT run_id FROM run_attributes WHERE key = {n(f'ak{i}')} "
            f"AND value = {n(f'av{i}')})"
        )
        params[f"ak{i}"] = key
        params[f"av{i}"] = value
    return conditions, params


def attribute_upsert(dialect: Dialect) -> str:
    """The statement that sets one search attribute of a run: (run_id, key, JSON text)."""
    p = dialect.param
    return (
        f"INSERT INTO run_attributes (run_id, key, value) VALUES ({p}, {p}, {p}) "
        "ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value"
    )


def attribute_rows(run_id: str, attributes: Mapping[str, str]) -> list[tuple[str, str, str]]:
    """The parameters of ``attribute_upsert`` for each attribute of a write."""
    return [(run_id, key, text) for key, text in attributes.items()]


def attribute_group(dialect: Dialect, runs: str = "runs") -> str:
    """The expression ``count --by attr:KEY`` groups by: the run's value of the attribute
    named by the parameter ``by_key`` (NULL when it has none)."""
    return (
        f"(SELECT a.value FROM run_attributes a WHERE a.run_id = {runs}.run_id "
        f"AND a.key = {dialect.named('by_key')})"
    )


def attributes_of(rows: Iterable[Sequence[Any]]) -> dict[str, dict[str, Any]]:
    """Each run's attributes from ``SELECT run_id, key, value FROM run_attributes`` rows."""
    found: dict[str, dict[str, Any]] = {}
    for run_id, key, text in rows:
        found.setdefault(run_id, {})[key] = json.loads(text)
    return found


STATE_COLUMNS = (
    "run_id, workflow, status, build_id, created_at, updated_at, decide_at, lease_owner, "
    "failing, waiting_on, failing_since"
)
"""The runs' columns a page of ``RUN_STATES`` selects (after ``created_order``)."""
RUN_STATES = (
    "SELECT r.run_id, r.workflow, r.status, r.build_id, r.created_at, r.updated_at, "
    "r.decide_at, r.lease_owner, r.failing, r.waiting_on, r.failing_since, "
    "t.step_id, t.attempt, t.available_at, t.lease_owner, t.step_name FROM ({page}) r "
    "LEFT JOIN step_tasks t ON t.run_id = r.run_id "
    "ORDER BY r.created_at DESC, r.created_order DESC, t.step_id"
)
"""The runs of a page (``created_order, STATE_COLUMNS`` of some runs) with their step tasks,
newest first: the rows ``assemble_states`` reads."""
LIST_HOOKS = "SELECT run_id, hook_id, token, resolved, created_at, metadata FROM hooks"
"""The hooks as ``hook_listing`` reads them (the caller adds its ``WHERE`` and order)."""
LIST_WORKERS = (
    "SELECT worker_id, host, pid, builds, started_at, heartbeat_at, heartbeat_seconds, "
    "stopped_at FROM workers ORDER BY started_at DESC, worker_id DESC"
)
"""Every registered worker, most recently started first, as ``worker_info`` reads them."""


def hook_record(row: Sequence[Any] | None) -> HookRecord | None:
    """A row of ``SELECT token, run_id, hook_id, resolved FROM hooks``, or ``None``."""
    if row is None:
        return None
    return HookRecord(token=row[0], run_id=row[1], hook_id=row[2], resolved=bool(row[3]))


def hook_listing(
    row: Sequence[Any], time: Callable[[Any], datetime], metadata: Callable[[Any], JsonValue]
) -> HookListing:
    """A row of ``LIST_HOOKS``; ``time`` and ``metadata`` read the backend's time and JSON."""
    return HookListing(
        run_id=row[0],
        hook_id=row[1],
        token=row[2],
        resolved=bool(row[3]),
        created_at=None if row[4] is None else time(row[4]),
        metadata=None if row[5] is None else metadata(row[5]),
    )


def worker_info(row: Sequence[Any], time: Callable[[Any], datetime]) -> WorkerInfo:
    """A row of ``LIST_WORKERS``; ``time`` reads the backend's time."""
    return WorkerInfo(
        worker_id=row[0],
        host=row[1],
        pid=int(row[2]),
        builds=tuple(json.loads(row[3])),
        started_at=time(row[4]),
        heartbeat_at=time(row[5]),
        heartbeat_seconds=float(row[6]),
        stopped_at=None if row[7] is None else time(row[7]),
    )
