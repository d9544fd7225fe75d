"""``flow limits``: the flow-control limits in effect fleet-wide (``--json``), and operators'
overrides of the code's values (``set`` / ``unset``), DESIGN §6.4.

A value is checked before the database is opened: a target that is not ``step:NAME`` or
``workflow:NAME``, a rate that does not parse, a concurrency below 1 is exit 2 with an example
of a right one, and nothing is written; so is a target no worker declared.
"""

from __future__ import annotations

from typing import Annotated

import typer

from flow_cli.cli.io import emit_json, out
from flow_cli.cli.options import JsonFlag, text_argument, text_option
from flow_cli.cli.state import CliState
from flow_cli.errors import LimitInvalid
from flow_cli.model.limits import (
    CONCURRENCY_EXAMPLE,
    LimitState,
    check_concurrency,
    parse_rate,
    parse_target,
)
from flow_cli.model.names import escape_controls

limits_app = typer.Typer(
    name="limits",
    help="Flow-control limits: at most N attempts of a step in flight, at most N started per "
    "period, at most N runs of a workflow in progress. Lists them (use, waiting, source); "
    "`set` / `unset` override the code's values fleet-wide.",
    invoke_without_command=True,
    rich_markup_mode=None,
)

Target = Annotated[
    str,
    text_argument("TARGET", "step:NAME or workflow:NAME (as declared in code)."),
]


@limits_app.callback()
def limits(ctx: typer.Context, json_output: JsonFlag = False) -> None:
    """List the limits in effect: concurrency, rate, attempts (or runs) in use and waiting.

    --json: [{"target", "concurrency", "rate", "in_use", "waiting", "source": "code"|"override"}].
    """
    if ctx.invoked_subcommand is not None:
        return
    state = CliState.of(ctx)
    with state.open_engine(create=False, with_runtimes=False, read_only=True) as engine:
        found = engine.limits.list()
    if state.want_json(json_output):
        emit_json([limit.to_json() for limit in found])
        return
    from flow_cli.cli import render

    render.console().print(limits_table(found))


@limits_app.command("set")
def set_limit(
    ctx: typer.Context,
    target: Target,
    concurrency: Annotated[
        int | None,
        text_option("--concurrency", "N", "At most N in flight at once."),
    ] = None,
    rate: Annotated[
        str | None,
        text_option(
            "--rate",
            "N/PERIOD",
            "Steps only: at most N attempts started per period (20/1s, 100/1m, 1000/1h).",
        ),
    ] = None,
) -> None:
    """Override TARGET's limit fleet-wide, at once (a value not given stays as it is)."""
    check_concurrency(concurrency, "--concurrency")  # the values first: they need no database
    if rate is not None:
        parse_rate(rate)
    if concurrency is None and rate is None:
        raise LimitInvalid("give --concurrency and/or --rate", CONCURRENCY_EXAMPLE)
    parse_target(target)
    state = CliState.of(ctx)
    with state.open_engine(create=False, with_runtimes=False) as engine:
        engine.limits.set(target, concurrency=concurrency, rate=rate)
    out(f"{escape_controls(target)}: override set")


@limits_app.command("unset")
def unset_limit(ctx: typer.Context, target: Target) -> None:
    """Drop TARGET's override: the code's values are in effect again."""
    parse_target(target)
    state = CliState.of(ctx)
    with state.open_engine(create=False, with_runtimes=False) as engine:
        engine.limits.unset(target)
    out(f"{escape_controls(target)}: back to the code's values")


def limits_table(found: list[LimitState]) -> object:
    """One line per limit: its values, its use now, where it comes from."""
    from rich import box
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("target", no_wrap=True)
    table.add_column("concurrency", justify="right", no_wrap=True)
    table.add_column("rate", justify="right", no_wrap=True)
    table.add_column("in use", justify="right", no_wrap=True)
    table.add_column("waiting", justify="right", no_wrap=True)
    table.add_column("source", no_wrap=True)
    for limit in found:
        table.add_row(
            Text(escape_controls(limit.target)),
            "-" if limit.concurrency is None else str(limit.concurrency),
            "-" if limit.rate is None else str(limit.rate),
            str(limit.in_use),
            Text(str(limit.waiting), style="yellow" if limit.waiting else ""),
            Text(limit.source, style="bold" if limit.source == "override" else "dim"),
        )
    noun = "limit" if len(found) == 1 else "limits"
    return Group(table, Text(f"{len(found)} {noun} in effect", style="dim"))
