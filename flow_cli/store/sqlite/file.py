"""The SQLite database file itself: created private, and an empty file told from a database.

A Flow database holds run inputs, seeds and hook tokens, so a new one is created readable by its
owner only (0600) whatever the umask; SQLite gives the ``-wal`` and ``-shm`` files it makes
beside it the main file's permissions.

A file of 0 bytes is not a Flow database: it is what a failed copy, a full disk or a stray
``touch`` leaves. Opened as is, SQLite would quietly make a fresh, empty database of it, and the
runs the operator expected would seem gone. So it is refused, unless another process is creating
the database this very moment (it made the file and writes the schema next): an empty file is
watched until the busy timeout passes before it is refused.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from flow_cli.errors import StoreError

FILE_MODE = 0o600
"""Permissions of a new database file (and so of its ``-wal`` and ``-shm`` files)."""

_POLL = 0.05
"""Seconds between looks at an empty file another process may be filling."""


def create_private(path: Path) -> bool:
    """Create ``path`` empty with mode 0600; ``False`` when it exists already (another process
    created it first: the caller then opens it as an existing file)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
    except FileExistsError:
        return False
    try:
        os.fchmod(fd, FILE_MODE)  # the umask may have taken bits off; never adds any
    finally:
        os.close(fd)
    return True


def refuse_empty(path: Path, wait_seconds: float) -> None:
    """Raise ``StoreError`` if ``path`` stays empty (0 bytes, no ``-wal`` content) for
    ``wait_seconds``: it is not a Flow database, and must not silently become a new one."""
    deadline = time.monotonic() + wait_seconds
    while _empty(path):
        if time.monotonic() >= deadline:
            raise StoreError(
                f"{path} is an empty file (0 bytes), not a Flow database. If it should hold "
                "your runs, restore it from a backup; to start a new database there, delete "
                "the empty file and run the command again."
            )
        time.sleep(_POLL)


def _empty(path: Path) -> bool:
    try:
        if path.stat().st_size > 0:
            return False
    except FileNotFoundError:
        return False  # gone meanwhile: the caller's open reports what it finds
    try:
        return Path(f"{path}-wal").stat().st_size == 0
    except FileNotFoundError:
        return True
