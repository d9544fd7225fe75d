"""Engine log records (worker, step executor, notable run events) as one line each on stderr.

``text`` (the default) prints ``level: message``, the way every Flow warning reads; no time
stamp, as the process supervisor (systemd, Docker, Kubernetes) stamps each line. ``json``
prints one JSON object per line for log shippers: ``time``, ``level``, ``event``, ``logger``,
``message`` and the event's fields (``run_id``, ``workflow``, ``build_id``, ``step_id``,
``step``, ``attempt``, ``error_type``, ``error``, ``next_attempt_at`` ...; see
``flow_cli.engine.observe.LogObserver``).
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any

from flow_cli.cli.io import note, one_line
from flow_cli.model.names import escape_controls

LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("debug", "info", "warning", "error")


class LineHandler(logging.Handler):
    """Prints a record as one line; an exception shows as ``Type: message``, never a traceback."""

    def __init__(self, level: int = logging.WARNING) -> None:
        super().__init__(level)
        self.json = False

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                error = record.exc_info[1]
                message += f": {type(error).__name__}: {error}"
            if self.json:
                note(json_line(record, message))
            else:
                note(f"{record.levelname.lower()}: {one_line(message)}")
                # Where the code raised (a decision_failed or step_failed), indented under it.
                fields = getattr(record, "flow_fields", None)
                trace = fields.get("traceback") if isinstance(fields, dict) else None
                if isinstance(trace, str):
                    for line in trace.splitlines():
                        note(f"    {escape_controls(line.rstrip())}")
        except Exception:  # a log line must never take the process down
            self.handleError(record)


def json_line(record: logging.LogRecord, message: str) -> str:
    """One record as one line of JSON (no markup, no newline inside)."""
    fields: dict[str, Any] = {
        "time": datetime.fromtimestamp(record.created, UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z"),
        "level": record.levelname.lower(),
        "event": getattr(record, "flow_event", "log"),
        "logger": record.name,
        "message": one_line(message),
    }
    extra = getattr(record, "flow_fields", None)
    if isinstance(extra, dict):
        fields.update({k: v for k, v in extra.items() if v is not None and k not in fields})
    return json.dumps(fields, ensure_ascii=False, default=str)


HANDLER = LineHandler(logging.WARNING)


def install(log_format: str = "text", level: str = "warning") -> LineHandler:
    """Route the ``flow.*`` loggers through ``HANDLER`` (idempotent) at ``level``, printing
    ``log_format`` lines, and return it."""
    logger = logging.getLogger("flow")
    if HANDLER not in logger.handlers:
        logger.addHandler(HANDLER)
    logger.propagate = False
    numeric = logging.getLevelName(level.upper())
    logger.setLevel(numeric)
    HANDLER.setLevel(numeric)
    HANDLER.json = log_format == "json"
    return HANDLER


def say(message: str, event: str, level: str | None = None, **fields: Any) -> None:
    """A line the command itself prints whatever the log level (start, stop, a crash): the
    plain ``message`` (after ``level: `` when given) in text, a JSON object in json."""
    if HANDLER.json:
        record = logging.LogRecord("flow.worker", logging.INFO, "", 0, "%s", (message,), None)
        record.levelname = (level or "info").upper()
        record.flow_event = event
        record.flow_fields = fields
        note(json_line(record, message))
    else:
        note(f"{level}: {message}" if level else message)
