"""Option and argument types shared by several commands."""

from __future__ import annotations

from typing import Annotated

import typer

JsonFlag = Annotated[
    bool,
    typer.Option("--json", help="Machine-readable JSON on stdout (stable field names, no colour)."),
]
RunArg = Annotated[str, typer.Argument(metavar="RUN", help="The run id.", show_default=False)]
LeaseSeconds = Annotated[
    float,
    typer.Option(
        "--lease-seconds",
        min=0.1,
        metavar="S",
        help="How long a leased run or step attempt stays reserved for this process; a process "
        "that dies releases its leases after S seconds.",
    ),
]
Payload = Annotated[
    str | None,
    typer.Option(
        "--payload",
        metavar="JSON|@FILE|-",
        help="The payload: literal JSON, @file.json, or - to read stdin. Default: null.",
        show_default=False,
    ),
]
