"""What the engine's services use of the ``Engine`` that owns them: ``EngineHost``.

``engine.engine.Engine`` makes its services (``limits``, ``pauses``, ``retention``, ``schedules``,
``talk``, ``worker``) and hands itself to them. Were they to name ``Engine`` as the type of
what they are given, each would import the module that imports it: a circle. They take an
``EngineHost`` instead, the part of ``Engine`` they call, declared here below both; ``Engine``
is one without saying so (a ``Protocol`` is matched by shape).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from flow_cli.engine.observe import Observer
    from flow_cli.engine.results import StartResult
    from flow_cli.engine.streams import Streams, Write
    from flow_cli.model.clock import Clock
    from flow_cli.model.jsonval import JsonValue
    from flow_cli.model.schedule_ref import ScheduleRef
    from flow_cli.model.snapshot import WorkflowRunSnapshot
    from flow_cli.runtime import Runtime
    from flow_cli.store.protocol import EventStore, HandOffs, NewRun, RunRecord


class EngineHost(Protocol):
    """The engine as its services see it: its store, clock and runtimes, and the few verbs they
    call on runs, with the arguments they pass (see ``Engine`` for what each does)."""

    store: EventStore
    clock: Clock
    worker_id: str
    runtimes: dict[str, Runtime]
    streams: Streams
    handoffs: HandOffs | None

    @property
    def build_ids(self) -> list[str]: ...

    @property
    def observer(self) -> Observer: ...

    def snapshot(self, run_id: str) -> WorkflowRunSnapshot: ...

    def get_run(self, run_id: str) -> RunRecord: ...

    def find_run(self, run_id: str) -> RunRecord | None: ...

    def commit_facts(
        self, writes: Sequence[Write], creates: Sequence[NewRun] = (), *, now: datetime
    ) -> list[WorkflowRunSnapshot]: ...

    def start(
        self, workflow: str, input: JsonValue, *, run_id: str, schedule: ScheduleRef
    ) -> StartResult: ...

    def cancel(self, run_id: str, reason: str) -> bool: ...

    def terminate(self, run_id: str, reason: str) -> bool: ...

    def next_due(self, within: float | None = None) -> datetime | None: ...
