"""``PauseGate``: whether a pause holds a run, for the decisions an engine makes without a lease.

The leases leave held runs out in the database (``flow_cli.store.pauses``), so a paused run is
neither decided by a worker that leases it nor are its steps started. Two paths decide a run
without a lease: a start that decides the new run at once (``Engine(eager_start=True)``), and
a step's end committed with the run's next decision. Each asks the gate first; a held run is
then only created, or only has the step's end recorded, and stays due for a worker, which will
not lease it while the pause lasts.

The gate reads the pauses table again once its copy is ``MAX_AGE`` old (a pause made in this
process drops the copy at once): on PostgreSQL a read is a round trip, which a step's end should
not pay each time. A question that finds the copy past half that age has it read again on a thread
of the gate's own and answers from the copy meanwhile, so that a steady stream of steps or starts
never waits for the read (a read on the step's path added 0.4 ms to one start in three of W3 on
PostgreSQL); a copy older than ``MAX_AGE`` is still read before answering.

A store may also look itself (``PauseProbes``): SQLite in each lease, and both SQL stores in
their next group commit when the gate asks (``PauseProbeRequests``; on PostgreSQL one more
statement in the commit's round trip). A look younger than ``MAX_AGE``, and than the copy, that
found nothing answers without a read, and while nothing is paused the gate asks the next commit
to look instead of reading on its thread: a read beside each start or step end costs a round
trip and thread hand-overs beside the work (docs/benchmarks.md). A pause made elsewhere
therefore reaches a worker's step chains within ``MAX_AGE``; its leases at once.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from flow_cli.errors import InputError, RunFinished
from flow_cli.model.names import check_name
from flow_cli.model.status import RunStatus
from flow_cli.store.pauses import (
    PauseKind,
    PauseProbeRequests,
    PauseProbes,
    Pauses,
    PauseSet,
    PauseTarget,
)
from flow_cli.store.protocol import RunFilter

if TYPE_CHECKING:
    from flow_cli.engine.host import EngineHost

MAX_AGE = 0.25
"""Seconds the gate trusts its copy of the pauses."""
IDLE_REFRESHER = 2.0
"""Seconds the gate's reading thread waits for another read before it ends."""

_log = logging.getLogger("flow.pauses")


_NOTHING = PauseSet()
"""Nothing is paused."""


class PauseGate:
    """The pauses of one store, as an engine's unleased decisions ask about them."""

    def __init__(self, store: Pauses) -> None:
        self._store = store
        self._probes = store if isinstance(store, PauseProbes) else None
        """The store's last look at the pauses table, when it tells it (SQLite's leases, the
        SQL stores' commits)."""
        self._requests = store if isinstance(store, PauseProbeRequests) else None
        """The store, when its next commit can be asked to look (SQLite, PostgreSQL)."""
        self._lock = threading.Lock()
        self._reading = threading.Lock()
        """Held by the one thread reading the table: a worker's step threads, finding the copy
        old at the same moment, would each take a connection and read it."""
        self._pauses = PauseSet()
        self._read_at: float | None = None
        self._forgotten = 0
        """How many times ``forget`` was called: a read that began before the last call is
        not kept as fresh."""
        self._wanted = threading.Event()
        self._refresher: threading.Thread | None = None

    def forget(self) -> None:
        """Read the pauses again at the next question (this process changed them)."""
        with self._lock:
            self._read_at = None
            self._forgotten += 1

    def current(self) -> PauseSet:
        """The pauses in force, read again if the copy is older than ``MAX_AGE`` (unless the
        store found nothing paused more recently: ``PauseProbes``). While one thread reads,
        the others answer from the old copy; with no copy (the first question, or after
        ``forget``) they wait for a read of their own."""
        now = time.monotonic()
        probe = self._probes.last_pause_probe() if self._probes is not None else None
        with self._lock:
            if (
                probe is not None
                and not probe[1]
                and now - probe[0] < MAX_AGE
                and (self._read_at is None or probe[0] >= self._read_at)
            ):
                if now - probe[0] >= MAX_AGE / 2:
                    self._look_again(_NOTHING)
                return _NOTHING  # newer than the copy
            if self._fresh(now):
                if self._read_at is not None and now - self._read_at >= MAX_AGE / 2:
                    self._look_again(self._pauses)
                return self._pauses
            copied = self._read_at is not None
        if not self._reading.acquire(blocking=not copied):
            return self._pauses  # another thread is reading: at most one read older
        try:
            return self._read()
        finally:
            self._reading.release()

    def _read(self, *, older_than: float = 0.0) -> PauseSet:
        """Read the table (``_reading`` held), unless another thread read it meanwhile: the
        copy is younger than ``MAX_AGE - older_than``."""
        with self._lock:
            at = self._read_at
            if at is not None and time.monotonic() - at < MAX_AGE - older_than:
                return self._pauses  # read by the thread this one waited for
            began = self._forgotten
        found = PauseSet(self._store.list_pauses())
        with self._lock:
            if self._forgotten == began:
                self._pauses, self._read_at = found, time.monotonic()
        return found

    def _look_again(self, found: PauseSet) -> None:
        """Have the pauses looked at again before the answer ``found`` is ``MAX_AGE`` old
        (``_lock`` held): by the store's next commit when nothing is paused and it can
        (``PauseProbeRequests``), else by a read on the gate's thread (which also learns what
        is paused)."""
        if self._requests is not None and not found:
            self._requests.want_pause_probe()
        else:
            self._refresh_soon()

    def _refresh_soon(self) -> None:
        """Have the gate's thread read the table (``_lock`` held); it is started when there is
        none, and ends once no read was wanted for ``IDLE_REFRESHER`` seconds."""
        self._wanted.set()
        if self._refresher is None:
            self._refresher = threading.Thread(
                target=self._refresh, name="flow-pauses", daemon=True
            )
            self._refresher.start()

    def _refresh(self) -> None:
        while True:
            if not self._wanted.wait(IDLE_REFRESHER):
                with self._lock:
                    if not self._wanted.is_set():
                        self._refresher = None
                        return
            self._wanted.clear()
            if not self._reading.acquire(blocking=False):
                continue  # a question is reading it now
            try:
                self._read(older_than=MAX_AGE / 2)  # unless read again meanwhile
            except Exception as exc:  # the next question past MAX_AGE reads (and raises) itself
                _log.debug("reading the pauses failed: %s", exc)
            finally:
                self._reading.release()

    def _fresh(self, now: float) -> bool:
        return self._read_at is not None and now - self._read_at < MAX_AGE

    def holds(self, run_id: str, workflow: str, build_id: str) -> bool:
        """Whether a pause holds this run."""
        pauses = self.current()
        return bool(pauses) and pauses.holding(run_id, workflow, build_id) is not None


@dataclass(frozen=True, slots=True, kw_only=True)
class PauseChange:
    """What ``Engine.pause`` or ``Engine.resume`` did to each target."""

    target: PauseTarget
    changed: bool
    """Paused (resumed) now; ``False``: it was paused (not paused) already."""
    open_runs: int
    """The open runs the target names (for a run: 1)."""


def check_targets(engine: EngineHost, targets: Sequence[PauseTarget], action: str) -> None:
    """Raise before anything is written: no target, targets of two kinds, an empty or
    unprintable name, or (to pause) a run that does not exist (``RunNotFound``) or has ended
    (``RunFinished``)."""
    if not targets:
        raise InputError(
            f"Nothing to {action}: name runs (flow {action} RUN...), or --workflow W, "
            "or --build-id B."
        )
    if len({t.kind for t in targets}) > 1:
        raise InputError(
            f"flow {action} takes one kind of target: runs, or --workflow W, or --build-id B."
        )
    for target in targets:
        what = "workflow name" if target.kind is PauseKind.WORKFLOW else f"{target.kind.value} id"
        check_name(target.name, what)
        if target.kind is PauseKind.RUN and action == "pause":
            record = engine.get_run(target.name)  # RunNotFound
            if record.status.terminal:
                raise RunFinished(target.name, record.status.value, "pause it")


def open_runs(engine: EngineHost, target: PauseTarget) -> int:
    """How many open runs ``target`` names."""
    if target.kind is PauseKind.RUN:
        record = engine.find_run(target.name)
        return 0 if record is None or record.status.terminal else 1
    where = RunFilter(
        statuses=tuple(s for s in RunStatus if not s.terminal),
        workflow=target.name if target.kind is PauseKind.WORKFLOW else None,
        build_id=target.name if target.kind is PauseKind.BUILD else None,
    )
    return engine.store.count_runs(where).total
