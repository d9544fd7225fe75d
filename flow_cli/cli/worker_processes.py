"""``flow worker --processes N``: one command, N worker processes.

A worker process runs Python on one core at a time, so one process leaves the others idle; N
processes share the database like N separate ``flow worker`` commands (leases keep them apart).
The parent starts each child as ``python -m flow_cli`` with the parent's own arguments (and
``--processes 1``; with ``--metrics-port P`` the children serve P, P+1, ...) and holds the
write end of a pipe the child watches:

- the parent asked to stop (SIGINT/SIGTERM) writes ``s``: each child stops as on its first
  signal (the attempts in hand finish); asked again it writes ``a``: each child aborts;
- the parent gone (killed), the pipe closes: each child stops, so none is left behind.

Signals that reach a child directly (Ctrl-C in a terminal signals the whole process group;
systemd signals the whole control group) are the child's own to handle, as for one worker.
A child that exits while nobody asked it to (it crashed, its database was unreachable at
start) stops the others, and the parent exits with its code, so a supervisor restarts the lot.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from types import FrameType

PARENT_FD = "FLOW_WORKER_PARENT_FD"
"""The environment variable that tells a child which inherited descriptor its pipe is."""

STOP = b"s"
ABORT = b"a"


def child_arguments(arguments: Sequence[str], metrics_port: int | None, index: int) -> list[str]:
    """The command-line arguments of child ``index``: the parent's own, with the options that
    must differ given again at the end (the last occurrence of an option wins)."""
    child = [*arguments, "--processes", "1"]
    if metrics_port is not None:
        child += ["--metrics-port", str(metrics_port + index)]
    return child


def supervise(processes: int, metrics_port: int | None, say: Callable[[str, str], None]) -> int:
    """Run ``processes`` children until they stop; the exit code for the parent.

    ``say(message, event)`` reports a child that ended on its own.
    """
    children: list[tuple[subprocess.Popen[bytes], int]] = []
    arguments = sys.argv[1:]
    try:
        for index in range(processes):
            read, write = os.pipe()
            env = dict(os.environ, **{PARENT_FD: str(read)})
            command = [sys.executable, "-m", "flow_cli"]
            command += child_arguments(arguments, metrics_port, index)
            try:
                proc = subprocess.Popen(command, env=env, pass_fds=(read,))
            finally:
                os.close(read)
            children.append((proc, write))
    except BaseException:
        for proc, write in children:
            _tell(write, ABORT)
            proc.wait()
            os.close(write)
        raise
    asked = threading.Event()
    # Only the running children are told: an ended child's pipe is closed, and its descriptor
    # number may belong to another file by then.
    running = {proc.pid: (proc, write) for proc, write in children}

    def handle(signum: int, frame: FrameType | None) -> None:
        word = ABORT if asked.is_set() else STOP
        asked.set()
        for _, write in list(running.values()):
            _tell(write, word)

    previous = {signum: signal.signal(signum, handle) for signum in (signal.SIGINT, signal.SIGTERM)}
    failed: int | None = None
    try:
        while running:
            # A signal's handler tells the children at once; this loop only looks for ends.
            time.sleep(0.2)
            for pid, (proc, write) in list(running.items()):
                code = proc.poll()
                if code is None:
                    continue
                del running[pid]  # before its pipe closes: the handler no longer writes it
                os.close(write)
                if asked.is_set():
                    if code not in (0, 130) and failed is None:
                        failed = 128 - code if code < 0 else code
                    continue
                # Nobody asked it to stop: the others stop too, and the parent says why.
                if code < 0:  # killed: the shell's convention, 128 + the signal's number
                    failed = 128 - code
                    how = f"was killed by {signal.Signals(-code).name}"
                else:
                    failed = code or 1
                    how = f"exited with code {code}"
                say(f"worker process {pid} {how}; stopping the others", "worker_process_exited")
                asked.set()
                for _, other in running.values():
                    _tell(other, STOP)
    finally:
        for signum, old in previous.items():
            signal.signal(signum, old)
    if failed is not None:
        return failed
    codes = {proc.returncode for proc, _ in children}
    return 130 if 130 in codes else 0


def _tell(write: int, word: bytes) -> None:
    with contextlib.suppress(OSError):  # the child is gone already
        os.write(write, word)


def watch_parent(stop: Callable[[], None], abort: Callable[[], None]) -> bool:
    """In a child: stop (or abort) when the parent says so or is gone. False when this
    process is no child of ``flow worker --processes``."""
    fd = os.environ.pop(PARENT_FD, None)
    if fd is None or not fd.isdigit():
        return False

    def watch() -> None:
        while True:
            try:
                word = os.read(int(fd), 1)
            except OSError:
                word = b""
            if word == ABORT:
                abort()
                return
            stop()
            if not word:  # the parent is gone: nothing more will come
                return

    threading.Thread(target=watch, name="flow-parent-watch", daemon=True).start()
    return True
