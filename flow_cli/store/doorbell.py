"""Doorbells: waking workers in other processes when a SQLite commit makes work, without polling.

SQLite has no notification channel. Each waiting worker binds a Unix datagram socket in a
directory named after the database file (under the temp directory, so a long or read-only
database path does not matter); a process that commits sends one byte to every socket there.
A waiter sleeps in ``select`` on its socket, so it wakes within a couple of milliseconds of a
commit in any process and costs nothing while idle. A process binds two: one rung by every
commit, and one (``*.work.sock``) rung only by commits that make work for workers, which a
worker sleeps on, so the commits that do not (its own step threads' among them, each step
handing its next one to itself) do not wake it only for it to sleep again. Sockets of processes
that died are removed by the next ringer. Where Unix sockets are not available, waiters fall
back to polling.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import select
import socket
import tempfile
import threading
import uuid
from pathlib import Path

_WORK_SUFFIX = ".work.sock"
"""The doorbells rung only for work (any older Flow rings them too, as it rings every one)."""


def doorbell_dir(database: Path) -> Path:
    """The directory of the doorbells of ``database`` (the same for every process)."""
    digest = hashlib.sha256(str(database.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"flow-doorbell-{os.getuid()}-{digest}"


class Doorbell:
    """One process's side of the doorbells of one database: ring them, or wait on its own."""

    def __init__(self, database: Path) -> None:
        self.directory = doorbell_dir(database)
        self._socket: socket.socket | None = None
        self._work_socket: socket.socket | None = None
        self._paths: list[Path] = []
        self._lock = threading.Lock()
        self._peers: list[str] = []
        self._peers_mtime: int | None = None
        self._sender: socket.socket | None = None

    @property
    def available(self) -> bool:
        return hasattr(socket, "AF_UNIX")

    def listen(self) -> bool:
        """Bind this process's doorbells (once). False when doorbells cannot be used here."""
        with self._lock:
            if self._socket is not None:
                return True
            if not self.available:
                return False
            stem = f"{os.getpid()}-{uuid.uuid4().hex[:8]}"
            bound: list[tuple[socket.socket, Path]] = []
            try:
                self.directory.mkdir(mode=0o700, exist_ok=True)
                for name in (f"{stem}{_WORK_SUFFIX}", f"{stem}.sock"):
                    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                    try:
                        sock.setblocking(False)
                        sock.bind(str(self.directory / name))
                    except OSError:
                        sock.close()
                        raise
                    bound.append((sock, self.directory / name))
            except OSError:
                for sock, path in bound:
                    sock.close()
                    with contextlib.suppress(OSError):
                        path.unlink()
                return False
            (self._work_socket, _), (self._socket, _) = bound
            self._paths = [path for _, path in bound]
            return True

    def wait(self, timeout: float, *, work_only: bool = False) -> bool:
        """Sleep until rung or ``timeout`` passes; True when rung.

        ``work_only``: on the doorbell that commits without work for workers do not ring.
        """
        sock = self._work_socket if work_only else self._socket
        if sock is None:
            return False
        ready, _, _ = select.select([sock], [], [], max(0.0, timeout))
        if not ready:
            return False
        with contextlib.suppress(OSError):  # drain: many rings are one wake-up
            while sock.recv(64):
                pass
        return True

    def ring(self, *, work: bool = True) -> None:
        """Wake every waiting process (best effort: a missed ring is caught by polling).

        ``work=False`` for a commit that gives workers nothing to do (a step its committer
        runs, a run's end): it wakes whoever waits for any change (``flow history --follow``,
        a wait for a run's end), not a worker's wait for work.
        """
        if not self.available:
            return
        peers = self._current_peers()
        if not peers:
            return
        with self._lock:
            if self._sender is None:
                try:
                    self._sender = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
                    self._sender.setblocking(False)
                except OSError:
                    return
            sender = self._sender
        for peer in peers:
            if not work and peer.endswith(_WORK_SUFFIX):
                continue
            try:
                sender.sendto(b"!", peer)
            except BlockingIOError:
                pass  # its queue is full: it has been rung already
            except OSError as exc:
                if exc.errno in (errno.ECONNREFUSED, errno.ENOENT):
                    with contextlib.suppress(OSError):
                        os.unlink(peer)  # its process is gone
                    self._peers_mtime = None

    def _current_peers(self) -> list[str]:
        try:
            mtime = self.directory.stat().st_mtime_ns
        except OSError:
            return []
        if mtime != self._peers_mtime:
            try:
                peers = [entry.path for entry in os.scandir(self.directory)]
            except OSError:
                return []
            self._peers = [p for p in peers if p.endswith(".sock")]
            self._peers_mtime = mtime
        return self._peers

    def close(self) -> None:
        with self._lock:
            for sock in (self._socket, self._work_socket, self._sender):
                if sock is not None:
                    with contextlib.suppress(OSError):
                        sock.close()
            for path in self._paths:
                with contextlib.suppress(OSError):
                    path.unlink()
            self._socket = self._work_socket = self._sender = None
            self._paths = []
