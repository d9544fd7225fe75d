"""Where ``flow export`` writes: file names for run ids, and writes that replace only files.

File names. ``-o DIR`` writes one file per run, named by its run id percent-encoded: every
byte of the id's UTF-8 outside ``A-Z a-z 0-9 _ . -`` becomes ``%XX`` (so ``/`` is ``%2F``,
``%`` is ``%25``, ``~`` is ``%7E``), and a leading ``.`` becomes ``%2E`` (no hidden files, no
``.`` or ``..``). ``urllib.parse.unquote`` of the name without ``.json`` gives the id back. An
encoded name longer than a file name may be (255 bytes) is cut, and ``~`` and 32 hex digits of
the SHA-256 of the whole id follow the cut: ``~`` appears in no other name, so no two ids share
a file name. The document inside holds the run id itself, which is what ``flow replay-check``
reads.

Targets. An export replaces a regular file (through a temporary file in the same directory, so
a failure leaves no half file) or creates a new one. It never replaces a FIFO, a device node
such as ``/dev/null`` or a directory: that is refused (exit 2); ``-`` is stdout.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from flow_cli.engine.export import export_file_name as export_file_name
from flow_cli.errors import InputError


def check_target(path: Path, shown: str) -> None:
    """Refuse (``InputError``) a ``path`` that exists and is not a regular file.

    A symbolic link counts as what it points to: a link to ``/dev/null`` is refused too.
    """
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return  # a new file (or a dangling link, which the write replaces)
    except OSError as exc:
        raise InputError(f"cannot write {shown}: {exc.strerror or exc}.") from None
    if stat.S_ISREG(mode):
        return
    kind = (
        "a directory"
        if stat.S_ISDIR(mode)
        else "a FIFO"
        if stat.S_ISFIFO(mode)
        else "a device"
        if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
        else "not a regular file"
    )
    raise InputError(f"-o {shown} is {kind}; export writes only regular files (or - for stdout).")


def write_file(path: Path, text: str, shown: str | None = None) -> os.stat_result:
    """Write ``text`` to the regular file ``path`` through a temporary file; its stat after.

    Raises ``InputError`` for a target that is no regular file or cannot be written.
    """
    shown = str(path) if shown is None else shown
    target = path.expanduser()
    check_target(target, shown)
    directory = target.parent if str(target.parent) else Path(".")
    try:
        fd, temporary = tempfile.mkstemp(prefix=".flow-export.", dir=directory)
    except OSError as exc:
        raise InputError(f"cannot write {shown}: {exc.strerror or exc}.") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        check_target(target, shown)  # narrows the window in which a FIFO could appear
        os.replace(temporary, target)
        return target.stat()
    except OSError as exc:
        Path(temporary).unlink(missing_ok=True)
        raise InputError(f"cannot write {shown}: {exc.strerror or exc}.") from None
    except InputError:
        Path(temporary).unlink(missing_ok=True)
        raise
