"""Keeping step leases alive while their handlers run.

Every process that runs steps (``flow worker`` and ``flow tick`` alike) renews the leases of the
attempts in hand, so a long step is never run a second time by another worker while the first is
still at it. A process that dies stops renewing, and its attempts become available once their
leases expire.

A renewal the store refuses means another worker took the attempt (its lease had run out, say
after a long pause of this process). The keeper tells its observer once the refusal repeats on
the next round while the handler still runs — a single refusal may only be the attempt's own
end, committed an instant before the executor let go of its lease — and stops renewing it.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta

from flow_cli.engine.observe import NOTHING, Observer
from flow_cli.errors import StoreError
from flow_cli.model.clock import Clock
from flow_cli.runtime import AttemptControl
from flow_cli.store.protocol import EventStore, StepHeartbeat, StepLease, StepRenewal

log = logging.getLogger("flow.leases")


class LeaseKeeper:
    """Renews the held step leases every third of ``lease_seconds`` on a background thread."""

    def __init__(
        self,
        store: EventStore,
        worker_id: str,
        clock: Clock,
        lease_seconds: float,
        observer: Observer = NOTHING,
    ) -> None:
        self.store = store
        self.observer = observer
        self._refused: set[tuple[str, str, int]] = set()
        """Held attempts whose last renewal was refused."""
        self._lost: set[tuple[str, str, int]] = set()
        """Held attempts reported lost (told once)."""
        self.worker_id = worker_id
        self.clock = clock
        self.lease_seconds = lease_seconds
        self._controls: dict[tuple[str, str], AttemptControl] = {}
        """The running attempts' heartbeats, stored with their next renewal."""
        self._written: dict[tuple[str, str], int] = {}
        """How many heartbeats of each attempt were stored (``AttemptControl.beats``)."""
        self._held: dict[tuple[str, str], StepLease] = {}
        self._until: dict[tuple[str, str], datetime] = {}
        """When each held lease runs out, as last recorded (taken, or renewed here)."""
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.renewals = 0

    def hold(self, lease: StepLease) -> None:
        step = (lease.run_id, lease.step_id)
        with self._lock:
            self._held[step] = lease
            self._until[step] = lease.lease_until

    def watch(self, lease: StepLease, control: AttemptControl) -> None:
        """Store ``control``'s heartbeats with the renewals of ``lease`` (one write per round
        at most, however often the handler beats), and cancel it if the lease is lost."""
        step = (lease.run_id, lease.step_id)
        with self._lock:
            self._controls[step] = control
            self._written[step] = 0

    def drop(self, lease: StepLease) -> None:
        step = (lease.run_id, lease.step_id)
        with self._lock:
            self._controls.pop(step, None)
            self._written.pop(step, None)
            self._held.pop(step, None)
            self._until.pop(step, None)
            if self._refused or self._lost:  # seldom: a refused renewal, a lost lease
                key = (*step, lease.attempt)
                self._refused.discard(key)
                self._lost.discard(key)

    def lost(self, lease: StepLease) -> None:
        """Stop renewing ``lease`` and tell the observer it was lost (once per attempt)."""
        key = (lease.run_id, lease.step_id, lease.attempt)
        with self._lock:
            if key in self._lost:
                return
            self._lost.add(key)
            self._refused.discard(key)
            control = self._controls.get((lease.run_id, lease.step_id))
        if control is not None:
            control.cancel("lease lost")
        self.observer.lease_lost(lease)

    @property
    def held(self) -> list[StepLease]:
        with self._lock:
            return list(self._held.values())

    def __enter__(self) -> LeaseKeeper:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="flow-lease", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def interval(self) -> float:
        """Seconds between two rounds of renewals."""
        return max(0.2, self.lease_seconds / 3)

    def renew_now(self) -> None:
        """Extend by ``lease_seconds`` from now every held lease that needs it: one that will
        still have more than half its time left at the next round is left alone. Each renewal
        is a write transaction of its own, and when many timers fire at once a worker holds
        a hundred leases or more, nearly all taken an instant ago: renewing them all would
        cost a flush each for nothing."""
        now = self.clock.now()
        until = now + timedelta(seconds=self.lease_seconds)
        enough = now + timedelta(seconds=self.interval + self.lease_seconds / 2)
        for lease in self.held:
            key = (lease.run_id, lease.step_id, lease.attempt)
            with self._lock:
                if key in self._lost:
                    continue
                left = self._until.get((lease.run_id, lease.step_id))
                beat = self._beat(lease, now)
                if beat is None and left is not None and left > enough:
                    continue
            try:
                renewed = self.store.renew_step(
                    StepRenewal(lease.run_id, lease.step_id, self.worker_id, until, beat)
                )
            except StoreError as exc:
                log.warning("%s", exc)
                continue
            if renewed:
                self.renewals += 1
                with self._lock:
                    self._refused.discard(key)
                    if self._held.get((lease.run_id, lease.step_id)) == lease:
                        self._until[(lease.run_id, lease.step_id)] = until
                continue
            with self._lock:
                still_held = self._held.get((lease.run_id, lease.step_id)) == lease
                again = key in self._refused
                if still_held and not again:
                    self._refused.add(key)
            if still_held and again:
                self.lost(lease)

    def _beat(self, lease: StepLease, now: datetime) -> StepHeartbeat | None:
        """The attempt's heartbeat not stored yet (called holding the lock)."""
        control = self._controls.get((lease.run_id, lease.step_id))
        if control is None:
            return None
        beats, details = control.latest()
        if beats <= self._written.get((lease.run_id, lease.step_id), 0):
            return None
        self._written[(lease.run_id, lease.step_id)] = beats
        return StepHeartbeat(
            step_id=lease.step_id,
            attempt=lease.attempt,
            worker=self.worker_id,
            details=details,
            at=now,
        )

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.renew_now()
