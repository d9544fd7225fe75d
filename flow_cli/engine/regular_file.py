"""Reading a file a user named, safely: regular files only, and only so many bytes.

A path given on the command line (or found in a directory) may be a FIFO, which blocks a plain
``open()`` until some writer appears, or a device such as ``/dev/zero``, which never ends. So the
path is checked with ``stat`` before it is opened, opened with ``O_NONBLOCK`` (a FIFO then opens
at once instead of waiting for a writer), and checked again with ``fstat`` on what was actually
opened, since the path may have been replaced in between. A regular file larger than ``limit``
is refused rather than read into memory.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from flow_cli.errors import InputError


def describe_kind(mode: int) -> str:
    """What a non-regular file is, in words ("a named pipe (FIFO)", "a directory", ...)."""
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def read_regular_file(path: Path, limit: int) -> bytes:
    """The bytes of ``path``, a regular file (or a link to one) of at most ``limit`` bytes.

    Raises:
        InputError: one sentence naming ``path`` and what is wrong: it does not exist (or is a
            link to nothing), it is not a regular file, it is larger than ``limit``, or it
            cannot be read.
    """
    try:
        before = os.stat(path)
    except FileNotFoundError:
        if path.is_symlink():
            raise InputError(
                f"cannot read {path}: it is a link to {os.readlink(path)}, which does not exist"
            ) from None
        raise InputError(f"cannot read {path}: No such file or directory") from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    _refuse_unless_regular(path, before.st_mode, before.st_size, limit)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as handle:
        opened = os.fstat(handle.fileno())
        _refuse_unless_regular(path, opened.st_mode, opened.st_size, limit)
        try:
            data = handle.read(limit + 1)  # one byte more tells a file that grew past the cap
        except OSError as exc:
            raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise _too_large(path, len(data), limit)
    return data


def _refuse_unless_regular(path: Path, mode: int, size: int, limit: int) -> None:
    if not stat.S_ISREG(mode):
        raise InputError(f"cannot read {path}: it is {describe_kind(mode)}, not a regular file")
    if size > limit:
        raise _too_large(path, size, limit)


def _too_large(path: Path, size: int, limit: int) -> InputError:
    return InputError(
        f"cannot read {path}: it holds {size:,} bytes or more, over the limit of {limit:,}"
    )
