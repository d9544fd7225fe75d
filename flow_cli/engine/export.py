"""``flow export`` files: a run's history as JSON, and reading such files back.

Secrets. A run's ``seed`` (in ``run_started``) derives its hook tokens (``ctx.new_token``), and a
hook token is all it takes to resolve the hook. So, by default, the export of a run that has not
finished leaves out the seed and every hook token (open and resolved alike, so that the file is
consistent): the seed becomes ``REDACTED_SEED`` and each token ``redacted:<hook id>``, and the
document lists what was left out under ``"redacted"``. A finished run's hooks can no longer be
resolved, so its export is complete. ``include_secrets=True`` (``--include-secrets``) keeps
everything.

``replay-check`` on a redacted export: the code derives tokens from the seed, so replaying it
proposes other tokens than the recorded ones. ``comparable()`` drops exactly those differences
(the ``token`` field of a hook); everything else is compared as usual. Values that workflow code
computes from ``ctx.random()`` depend on the seed too: to replay-check such code on an unfinished
run, export it with ``--include-secrets``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from flow_cli.engine.regular_file import read_regular_file
from flow_cli.errors import InputError
from flow_cli.model.events import TERMINAL_KEYS, EventEnvelope, RunStarted

if TYPE_CHECKING:
    from flow_cli.engine.replay_check import ReplayResult

EXPORT_FORMAT = "flow-history"
EXPORT_VERSION = 1
"""The one format version this Flow writes and reads; a file of another version is refused."""
MAX_EXPORT_BYTES = 64 * 1024 * 1024
"""The largest history file ``replay-check --file`` reads: 64 MiB. A larger one is refused
rather than read into memory (a symlink to ``/dev/zero`` would otherwise be read until memory
runs out); check such a run from the database instead."""

REDACTED_SEED = "0" * 32
"""What a redacted export records as the seed (valid hex, so the history still replays)."""
REDACTED_TOKEN_PREFIX = "redacted:"
"""A redacted hook token is this prefix and the hook id."""
SEED = "seed"
TOKENS = "hook tokens"


NAME_MAX = 255
"""The longest file name, in bytes, on Linux, macOS and Windows file systems."""
SUFFIX = ".json"
HASH_DIGITS = 32


def export_file_name(run_id: str) -> str:
    """The file name of ``run_id``'s export in ``flow export -o DIR`` and in an archive
    (``flow prune --archive``): see ``cli.export_files``."""
    encoded = quote(run_id, safe="").replace("~", "%7E")
    if encoded.startswith("."):
        encoded = "%2E" + encoded[1:]
    if len(encoded) + len(SUFFIX) <= NAME_MAX:
        return encoded + SUFFIX
    digest = hashlib.sha256(run_id.encode("utf-8")).hexdigest()[:HASH_DIGITS]
    prefix = encoded[: NAME_MAX - len(SUFFIX) - 1 - HASH_DIGITS]
    cut = prefix.rfind("%", len(prefix) - 2)
    if cut != -1:  # do not split a %XX escape
        prefix = prefix[:cut]
    return f"{prefix}~{digest}{SUFFIX}"


@dataclass(frozen=True, slots=True)
class ExportFile:
    """A ``flow export`` file as read back."""

    run_id: str
    events: list[EventEnvelope]
    redacted: frozenset[str]
    """What the export left out: ``SEED``, ``TOKENS`` (empty for a complete export)."""


def export_document(
    run_id: str, history: Sequence[EventEnvelope], *, include_secrets: bool = False
) -> dict[str, Any]:
    """What ``flow export`` writes: the history in the ``flow history --json`` shape.

    Unless ``include_secrets`` or the run has finished, the seed and hook tokens are left out
    (see the module docstring).
    """
    events = [e.to_json() for e in history]
    finished = bool(history) and history[-1].event.event_key() in TERMINAL_KEYS
    redact = not include_secrets and not finished
    if redact:
        events = [_redact(event) for event in events]
    return {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "run_id": run_id,
        "redacted": [SEED, TOKENS] if redact else [],
        "events": events,
    }


def _redact(event: dict[str, Any]) -> dict[str, Any]:
    data = dict(event["data"])
    if event["event_key"] == "run_started" and "seed" in data:
        data["seed"] = REDACTED_SEED
    elif event["event_key"] in ("hook_created", "hook_resolved") and "token" in data:
        data["token"] = f"{REDACTED_TOKEN_PREFIX}{data.get('hook_id')}"
    return {**event, "data": data}


def read_export(path: Path) -> ExportFile:
    """Read a ``flow export`` file. Raises ``InputError`` with one clear sentence.

    Only a regular file of at most ``MAX_EXPORT_BYTES`` is read (never a FIFO or a device), of
    format version ``EXPORT_VERSION``, whose history is numbered 1, 2, 3, ... and starts with
    ``run_started``.
    """
    data = read_regular_file(path, MAX_EXPORT_BYTES)
    try:
        document = json.loads(data.decode("utf-8"))
    except json.JSONDecodeError as exc:
        raise InputError(f"{path} is not JSON: {exc.msg} at line {exc.lineno}") from None
    except (RecursionError, ValueError) as exc:
        raise InputError(f"{path} cannot be read: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != EXPORT_FORMAT:
        raise InputError(f"{path} is not a `flow export` file (format {EXPORT_FORMAT!r})")
    version = document.get("version")
    if type(version) is not int or version != EXPORT_VERSION:
        raise InputError(
            f"{path} is a `flow export` file of format version {version!r}; this Flow reads "
            f"version {EXPORT_VERSION} only (a newer Flow wrote it? check it with that Flow)"
        )
    run_id = document.get("run_id")
    if not isinstance(run_id, str) or not run_id:
        raise InputError(f"{path}: 'run_id' must be a non-empty string")
    redacted = document.get("redacted", [])
    if not isinstance(redacted, list) or not all(isinstance(r, str) for r in redacted):
        raise InputError(f"{path}: 'redacted' must be a list of strings")
    items = document.get("events")
    if not isinstance(items, list) or not items:
        raise InputError(f"{path}: 'events' must be a non-empty list of events")
    for expected, item in enumerate(items, start=1):
        sequence = item.get("sequence") if isinstance(item, dict) else None
        if type(sequence) is not int or sequence != expected:
            raise InputError(
                f"{path}: event {expected} of run {run_id!r} has sequence {sequence!r}; a "
                "history is numbered 1, 2, 3, ... without gaps"
            )
    try:
        events = [EventEnvelope.from_json(run_id, item) for item in items]
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{path} holds a malformed event: {exc}") from None
    if not isinstance(events[0].event, RunStarted):
        raise InputError(
            f"{path}: the history of run {run_id!r} starts with "
            f"{events[0].event.event_key()!r}, not 'run_started'"
        )
    return ExportFile(run_id=run_id, events=events, redacted=frozenset(redacted))


def load_export(path: Path) -> tuple[str, list[EventEnvelope]]:
    """Read a ``flow export`` file: ``(run_id, events)``. Raises ``InputError``."""
    found = read_export(path)
    return found.run_id, found.events


def comparable(result: ReplayResult, redacted: Collection[str]) -> ReplayResult:
    """``result`` without the differences that a redacted export cannot decide.

    With ``TOKENS`` redacted, the recorded token of a hook is a placeholder: a ``token``
    difference whose recorded value is one says nothing about the code, so it is dropped.
    """
    if TOKENS not in redacted:
        return result
    kept = tuple(
        d
        for d in result.divergences
        if not (
            d.field == "token"
            and isinstance(d.recorded, str)
            and d.recorded.startswith(REDACTED_TOKEN_PREFIX)
        )
    )
    if len(kept) == len(result.divergences):
        return result
    return dataclasses.replace(result, divergences=kept, ok=not kept and result.error is None)
