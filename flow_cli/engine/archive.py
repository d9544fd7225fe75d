"""Archive directories: where ``flow prune --archive DIR`` keeps the histories it deletes.

Layout. ``DIR/<ended date>/<run>.json`` holds one run's history in the ``flow export`` format
(``engine.export``: read back by ``flow replay-check --file DIR``), named as ``flow export -o``
names files; the date is the UTC day of the run's last event. ``DIR/MANIFEST.jsonl`` has one
line per file written: ``{"path", "run_id", "sha256", "bytes", "events"}`` (``path`` relative
to ``DIR``, with ``/``). A path written twice (a prune resumed after a crash) has several
lines; the last one counts.

Durability. Each file is written to ``DIR/.partial/`` first (named after the writing process,
so that two prunes may share an archive), flushed to disk (a batch's files
together: one ``syncfs`` on Linux, else an ``fsync`` each) and renamed into its day directory,
whose entry is flushed too; then the batch's manifest lines
are appended and flushed. Only then may the runs be deleted. A crash leaves at worst a file
without its manifest line (or a torn last line, cut off when the archive is next opened) and
its run still in the database: the next prune writes both again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import stat
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import TypeVar

from flow_cli.engine.export import export_document, export_file_name
from flow_cli.errors import ArchiveFailed, InputError
from flow_cli.model.events import EventEnvelope

T = TypeVar("T")

MANIFEST = "MANIFEST.jsonl"
PARTIAL = ".partial"
"""Where files are written before they are renamed into place (emptied when opened)."""


def archive_text(run_id: str, history: Sequence[EventEnvelope]) -> bytes:
    """The archive file of an ended run: its ``flow export`` document (complete: a finished
    run's export keeps its seed and tokens), as one line of UTF-8 JSON."""
    document = export_document(run_id, history)
    # Compact: the same document as `flow export` writes, whose indentation would cost most of
    # a prune's time (Python's JSON encoder indents in pure Python).
    return (json.dumps(document, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def archive_path(run_id: str, history: Sequence[EventEnvelope]) -> str:
    """``<ended date>/<file name>``: where in an archive the run's history goes."""
    ended = history[-1].recorded_at.astimezone(UTC).date().isoformat()
    return f"{ended}/{export_file_name(run_id)}"


@dataclass(frozen=True, slots=True)
class Entry:
    """One manifest line."""

    path: str
    run_id: str
    sha256: str
    size: int
    events: int

    def line(self) -> str:
        return json.dumps(
            {
                "path": self.path,
                "run_id": self.run_id,
                "sha256": self.sha256,
                "bytes": self.size,
                "events": self.events,
            },
            ensure_ascii=False,
            separators=(",", ":"),
        )


class Archive:
    """An archive directory open for writing (``flow prune --archive DIR``).

    Raises ``InputError`` (one sentence, nothing written) when ``DIR`` is missing, is not a
    directory or cannot be written.
    """

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        check_writable(directory)
        self._entries = _repair_manifest(directory / MANIFEST)
        self._partial = directory / PARTIAL
        if self._partial.is_dir():
            for left in self._partial.iterdir():  # a crashed prune's half-written files
                owner = left.name.partition(".")[0]
                if owner.isdigit() and not _alive(int(owner)):
                    with contextlib.suppress(OSError):
                        left.unlink()

    def write(self, runs: Sequence[tuple[str, Sequence[EventEnvelope]]]) -> int:
        """Write each run's history durably, then its manifest line; returns the bytes written.

        When this returns, every file and line is on disk: the runs may be deleted. Raises
        ``ArchiveFailed`` when a file cannot be written.
        """
        try:
            return self._write(runs)
        except OSError as exc:
            raise ArchiveFailed(str(self.directory), exc.strerror or str(exc)) from None

    def _write(self, runs: Sequence[tuple[str, Sequence[EventEnvelope]]]) -> int:
        lines: list[str] = []
        written = 0
        made: set[Path] = set()
        pending: list[tuple[int, Path, Path]] = []
        self._partial.mkdir(exist_ok=True)
        try:
            for run_id, history in runs:
                data = archive_text(run_id, history)
                relative = archive_path(run_id, history)
                digest = hashlib.sha256(data).hexdigest()
                target = self.directory / relative
                if self._entries.get(relative) == digest and _same_file(target, digest):
                    continue  # written by a prune that stopped before its delete
                temporary = self._partial / f"{os.getpid()}.{target.name}"
                fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
                pending.append((fd, temporary, target))
                _write_all(fd, data)
                written += len(data)
                lines.append(Entry(relative, run_id, digest, len(data), len(history)).line())
                self._entries[relative] = digest
            _flush([fd for fd, _, _ in pending])
        finally:
            for fd, _, _ in pending:
                os.close(fd)
        for _, temporary, target in pending:
            if target.parent not in made:
                target.parent.mkdir(exist_ok=True)
                made.add(target.parent)
            os.replace(temporary, target)
        with contextlib.suppress(OSError):
            self._partial.rmdir()
        for day in made:
            _fsync_directory(day)
        if made:
            _fsync_directory(self.directory)
        if lines:
            with open(self.directory / MANIFEST, "a", encoding="utf-8") as manifest:
                manifest.write("".join(line + "\n" for line in lines))
                manifest.flush()
                os.fsync(manifest.fileno())
        return written


def _refused_if_unread(read: Callable[[], T], missing: str, failing: str) -> T:
    """``read()``, an operator's path it could not read refused (``InputError``): ``missing``
    when the file is not there, else ``failing`` with the system's words."""
    try:
        return read()
    except FileNotFoundError:
        raise InputError(missing) from None
    except OSError as exc:
        raise InputError(f"{failing}: {exc.strerror or exc}.") from None


def check_writable(directory: Path, what: str = "--archive") -> None:
    """Refuse (``InputError``) an archive directory that is missing or cannot be written;
    ``what`` names where it was given."""
    mode = _refused_if_unread(
        lambda: directory.stat().st_mode,
        f"{what} {directory}: no such directory; create it first (mkdir -p {directory}).",
        f"{what} {directory}",
    )
    if not stat.S_ISDIR(mode):
        raise InputError(f"{what} {directory} is not a directory.")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise InputError(f"{what} {directory} is not writable; nothing was pruned.")
    manifest = directory / MANIFEST
    if manifest.exists() and not os.access(manifest, os.W_OK):
        raise InputError(f"{what} {directory}: {MANIFEST} is not writable; nothing was pruned.")


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (its half-written files are not to be removed)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


def _flush(fds: Sequence[int]) -> None:
    """Put the files open as ``fds`` (all on one file system) on disk.

    On Linux, one ``syncfs`` does it for them all: a batch's hundred files cost one journal
    commit instead of a hundred. Elsewhere, or if it fails, one ``fsync`` each.
    """
    if not fds:
        return
    if _syncfs is not None and _syncfs(fds[0]) == 0:
        return
    for fd in fds:
        os.fsync(fd)


def _load_syncfs() -> Callable[[int], int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        call: Callable[[int], int] = ctypes.CDLL(None, use_errno=True).syncfs
    except (OSError, AttributeError):
        return None
    return call


_syncfs = _load_syncfs()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _same_file(path: Path, digest: str) -> bool:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest() == digest
    except OSError:
        return False


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _repair_manifest(path: Path) -> dict[str, str]:
    """The manifest's entries (path → sha256, the last line of a path counts), after cutting
    off a torn last line (a crash in the middle of an append)."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    if data and not data.endswith(b"\n"):
        keep = data.rfind(b"\n") + 1
        with open(path, "r+b") as handle:
            handle.truncate(keep)
            os.fsync(handle.fileno())
        data = data[:keep]
    entries: dict[str, str] = {}
    for line in data.decode("utf-8", errors="replace").splitlines():
        with contextlib.suppress(ValueError, TypeError, KeyError, AttributeError):
            found = json.loads(line)
            entries[str(found["path"])] = str(found["sha256"])
    return entries


# -- verify ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Verified:
    """What ``flow archive verify`` found."""

    files: int
    """Files the manifest lists."""
    runs: int
    bytes: int
    problems: tuple[str, ...]
    """One sentence per problem: a missing file, a changed one, an extra one, a bad line."""


def verify(directory: Path) -> Verified:
    """Check every file the manifest of ``directory`` lists against its sha256, and look for
    files it does not list. Raises ``InputError`` when ``directory`` is not an archive."""
    if not directory.is_dir():
        raise InputError(f"{directory} is not a directory.")
    manifest = directory / MANIFEST
    data = _refused_if_unread(
        manifest.read_bytes,
        f"{directory} has no {MANIFEST}: not an archive written by `flow prune --archive`.",
        f"cannot read {manifest}",
    )
    problems: list[str] = []
    entries: dict[str, tuple[str, int]] = {}
    runs: set[str] = set()
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), start=1):
        try:
            found = json.loads(line)
            path, digest = str(found["path"]), str(found["sha256"])
            runs.add(str(found["run_id"]))
            size = int(found.get("bytes", -1))
        except (ValueError, TypeError, KeyError, AttributeError):
            problems.append(f"{MANIFEST} line {number}: not a manifest entry")
            continue
        entries[path] = (digest, size)
    if data and not data.endswith(b"\n"):
        problems.append(f"{MANIFEST}: the last line is cut off")
    total = 0
    for path, (digest, _) in sorted(entries.items()):
        target = directory / path
        try:
            content = target.read_bytes()
        except FileNotFoundError:
            problems.append(f"missing: {path}")
            continue
        except OSError as exc:
            problems.append(f"unreadable: {path} ({exc.strerror or exc})")
            continue
        total += len(content)
        if hashlib.sha256(content).hexdigest() != digest:
            problems.append(f"changed: {path} (its sha256 is not the manifest's)")
    for path in _files(directory):
        if path not in entries:
            problems.append(f"extra: {path} (not in {MANIFEST})")
    return Verified(len(entries), len(runs), total, tuple(problems))


def _files(directory: Path) -> Iterator[str]:
    """Every file below ``directory`` but the manifest, as a relative path with ``/``."""
    for root, dirs, names in os.walk(directory):
        dirs.sort()
        for name in sorted(names):
            relative = Path(root, name).relative_to(directory).as_posix()
            if relative != MANIFEST:
                yield relative
