"""``flow export`` files: a run's history as JSON, and reading such files back."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from flow_cli.errors import InputError
from flow_cli.model.events import EventEnvelope

EXPORT_FORMAT = "flow-history"
EXPORT_VERSION = 1


def export_document(run_id: str, history: Sequence[EventEnvelope]) -> dict[str, Any]:
    """What ``flow export`` writes: the history in the ``flow history --json`` shape."""
    return {
        "format": EXPORT_FORMAT,
        "version": EXPORT_VERSION,
        "run_id": run_id,
        "events": [e.to_json() for e in history],
    }


def load_export(path: Path) -> tuple[str, list[EventEnvelope]]:
    """Read a ``flow export`` file. Raises ``InputError`` with one clear sentence."""
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{path} is not JSON: {exc.msg} at line {exc.lineno}") from None
    if not isinstance(document, dict) or document.get("format") != EXPORT_FORMAT:
        raise InputError(f"{path} is not a `flow export` file (format {EXPORT_FORMAT!r})")
    run_id = str(document.get("run_id"))
    try:
        events = [EventEnvelope.from_json(run_id, item) for item in document["events"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"{path} holds a malformed event: {exc}") from None
    return run_id, events
