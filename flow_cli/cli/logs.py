"""Engine log records (worker, step executor) as one ``warning: ...`` line each on stderr."""

from __future__ import annotations

import logging

from flow_cli.cli.io import note, one_line


class LineHandler(logging.Handler):
    """Prints a record as one line; an exception shows as ``Type: message``, never a traceback."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            if record.exc_info and record.exc_info[1] is not None:
                error = record.exc_info[1]
                message += f": {type(error).__name__}: {error}"
            note(f"{record.levelname.lower()}: {one_line(message)}")
        except Exception:  # a log line must never take the process down
            self.handleError(record)


HANDLER = LineHandler(logging.WARNING)


def install() -> LineHandler:
    """Route the ``flow.*`` loggers through ``HANDLER`` (idempotent) and return it."""
    logger = logging.getLogger("flow")
    if HANDLER not in logger.handlers:
        logger.addHandler(HANDLER)
    logger.propagate = False
    return HANDLER
