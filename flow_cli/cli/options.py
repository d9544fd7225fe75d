"""Option and argument types shared by several commands."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

import typer

from flow_cli.cli.bundles import text_option as text_option  # where most commands look for it


def text_argument(metavar: str, help: str, **extra: Any) -> Any:
    """An argument with no default worth showing, as ``text_option`` is for options."""
    return typer.Argument(metavar=metavar, help=help, show_default=False, **extra)


RunInput = Annotated[
    str | None,
    text_option(
        "--input",
        "JSON|@FILE|-",
        "The run input: literal JSON, @file.json, or - to read stdin. Default: null.",
    ),
]
JsonFlag = Annotated[
    bool,
    typer.Option("--json", help="Machine-readable JSON on stdout (stable field names, no colour)."),
]


def complete_run_id(ctx: typer.Context, incomplete: str) -> list[str]:
    """Shell completion for RUN: recent run ids from the database the options name."""
    try:
        from flow_cli.cli.state import CliState

        params = ctx.find_root().params
        state = CliState(db=params.get("db"), config_option=params.get("config"))
        with state.open_engine(create=False, with_runtimes=False, read_only=True) as engine:
            runs = engine.list_runs(limit=COMPLETION_LIMIT)
        return [r.run_id for r in runs if r.run_id.startswith(incomplete)]
    except Exception:  # completion must never print an error into the user's prompt
        return []


COMPLETION_LIMIT = 200
MAX_LEASE_SECONDS = 86400.0
"""The longest ``--lease-seconds`` (a day): a longer lease only delays recovery from a dead
process, and ``inf`` or ``1e300`` are no time at all."""
MAX_CONCURRENCY = 1024
"""The most step threads one worker process runs (``--concurrency``)."""
MAX_PROCESSES = 256
"""The most worker processes ``flow worker --processes`` starts."""
RunArg = Annotated[
    str,
    text_argument("RUN", "The run id.", autocompletion=complete_run_id),
]
LeaseSeconds = Annotated[
    float,
    typer.Option(
        "--lease-seconds",
        min=0.1,
        max=MAX_LEASE_SECONDS,
        metavar="S",
        help="How long a leased run or step attempt stays reserved for this process; a process "
        "that dies releases its leases after S seconds (at most 86400, a day).",
    ),
]
SignalKey = Annotated[
    str | None,
    typer.Option(
        "--key",
        metavar="KEY",
        help="Idempotency key: a signal of this name already delivered with the same key "
        "is not delivered again (re-running the command is safe).",
    ),
]

Payload = Annotated[
    str | None,
    text_option(
        "--payload",
        "JSON|@FILE|-",
        "The payload: literal JSON, @file.json, or - to read stdin. Default: null.",
    ),
]


class LogFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


class LogLevel(StrEnum):
    DEBUG = "debug"
    INFO = "info"
    WARNING = "warning"
    ERROR = "error"


LogFormatOption = Annotated[
    LogFormat,
    typer.Option(
        "--log-format",
        metavar="text|json",
        help="How log lines on stderr look: 'text' sentences, or one JSON object per line "
        "(time, level, event, run_id, workflow, build_id, step, error ...) for log shippers.",
        case_sensitive=False,
    ),
]
LogLevelOption = Annotated[
    LogLevel,
    typer.Option(
        "--log-level",
        metavar="LEVEL",
        help="Least severe log lines shown: debug, info (decisions recovered, database back), "
        "warning (decision or step attempt failed, lease lost, database unavailable) or error "
        "(step exhausted, run failed).",
        case_sensitive=False,
    ),
]
