"""Flow-control limits on the engine's side (``DESIGN.md`` §6.4): declaring the code's limits
to the database, operators' overrides (``flow limits set/unset``), what ``flow limits`` lists,
and the gate that keeps a limited step out of the paths that start a step without a lease
(a decision's own commit, a start's hand-off), so that every attempt of it is leased where its
limit is enforced: in the database (``flow_cli.store.limits_sql``)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from flow_cli.errors import LimitInvalid
from flow_cli.model.limits import (
    CONCURRENCY_EXAMPLE,
    TARGET_EXAMPLE,
    DeclaredLimit,
    LimitState,
    check_concurrency,
    parse_rate,
    parse_target,
)
from flow_cli.store.limits_sql import LIMITS_LOOK_SECONDS
from flow_cli.store.protocol import LimitedStarts

if TYPE_CHECKING:
    from flow_cli.engine.host import EngineHost
    from flow_cli.runtime import Runtime
    from flow_cli.store.protocol import EventStore


def declared_limits(runtimes: Iterable[Runtime]) -> list[DeclaredLimit]:
    """Every workflow and step of these builds with the limits its decorator declared."""
    found: dict[str, DeclaredLimit] = {}
    for runtime in runtimes:
        for target, limit in runtime.limits.items():
            if target not in found or limit.limited:
                found[target] = limit
    return [found[target] for target in sorted(found)]


class StepGate:
    """Which steps and workflows are under a limit, as this process knows it: the code's
    declarations at once, the database's (overrides) as looked up at most
    ``LIMITS_LOOK_SECONDS`` ago."""

    def __init__(self, store: EventStore, runtimes: Iterable[Runtime]) -> None:
        self._store = store
        # Asked once: a runtime protocol's isinstance looks at every method of it, per step.
        self._starts: LimitedStarts | None = store if isinstance(store, LimitedStarts) else None
        self._code = frozenset(limit.target for limit in declared_limits(runtimes) if limit.limited)
        self._stored: frozenset[str] = frozenset()
        self._looked = float("-inf")
        self._lock = threading.Lock()

    def holds(self, name: str) -> bool:
        """Whether step ``name`` must be leased under its limit (never started in a commit
        that did not count it)."""
        return self._limited(f"step:{name}")

    def starts_in_commit(self, name: str) -> bool:
        """Whether an attempt of limited step ``name`` may start in the commit that schedules
        it: the store counts it there under the limit (``LimitedStarts``)."""
        return self._starts is not None and self._starts.starts_in_commit(name)

    def holds_run(self, workflow: str) -> bool:
        """Whether a new run of ``workflow`` waits to be admitted under its limit (never
        decided in the commit that creates it)."""
        return self._limited(f"workflow:{workflow}")

    def _limited(self, target: str) -> bool:
        if target in self._code:
            return True
        now = time.monotonic()
        if now - self._looked >= LIMITS_LOOK_SECONDS:
            with self._lock:
                if now - self._looked >= LIMITS_LOOK_SECONDS:
                    self._stored = self._store.limited_targets()
                    self._looked = now
        return target in self._stored


class LimitService:
    """``flow limits``: the limits in effect fleet-wide, and the operator's overrides.

    Get it as ``engine.limits``.
    """

    def __init__(self, engine: EngineHost) -> None:
        self.engine = engine

    def declare(self) -> None:
        """Record this engine's code limits in the database (a worker does at start)."""
        self.engine.store.declare_limits(declared_limits(self.engine.runtimes.values()))

    def list(self) -> list[LimitState]:
        """Every limit in effect, by target, with its use now."""
        return self.engine.store.limit_states(self.engine.clock.now())

    def targets(self) -> frozenset[str]:
        """The targets a limit is in effect for (``step:NAME``, ``workflow:NAME``)."""
        return self.engine.store.limited_targets()

    def set(self, target: str, *, concurrency: int | None = None, rate: str | None = None) -> None:
        """Override the limit of ``target`` (``step:NAME`` / ``workflow:NAME``) fleet-wide.

        Raises ``LimitInvalid`` (nothing written) for a target that is not of that form or
        that no worker declared, a rate that does not parse, a concurrency below 1, or neither
        value given.
        """
        kind, _ = parse_target(target)
        check_concurrency(concurrency)
        parsed = None if rate is None else parse_rate(rate)
        if concurrency is None and parsed is None:
            raise LimitInvalid("give --concurrency and/or --rate", CONCURRENCY_EXAMPLE)
        if kind == "workflow" and parsed is not None:
            raise LimitInvalid(
                "a workflow limit has no rate, only --concurrency", CONCURRENCY_EXAMPLE
            )
        if not self.engine.store.override_limit(target, concurrency, parsed):
            raise self._unknown(target)

    def unset(self, target: str) -> None:
        """Drop the override of ``target``: the code's values are in effect again."""
        parse_target(target)
        if not self.engine.store.clear_override(target):
            raise self._unknown(target)

    def _unknown(self, target: str) -> LimitInvalid:
        return LimitInvalid(
            f"no worker declared {target!r}; a target is a workflow or step of code a worker "
            "has run (`flow limits` lists the limited ones)",
            TARGET_EXAMPLE,
        )
