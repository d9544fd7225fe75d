"""``flow top``: the live terminal view (``flow_cli.cli.top``), when Textual is installed."""

from __future__ import annotations

import importlib.util
from typing import Annotated

import typer

from flow_cli.cli.state import CliState
from flow_cli.errors import FlowError, InputError

TUI_EXTRA = "pip install 'flow-cli[tui]'"


def top(
    ctx: typer.Context,
    read_only: Annotated[
        bool,
        typer.Option("--read-only", help="Only look: no key cancels, terminates or signals a run."),
    ] = False,
    refresh: Annotated[
        float,
        typer.Option(
            "--refresh",
            metavar="SECONDS",
            min=0.1,
            max=60.0,
            help="Seconds between two readings of the database.",
        ),
    ] = 1.0,
) -> None:
    """A live view of the runs: counts, a filterable table, a run's detail, workers.

    The header counts the runs by status and the doctor's causes, and the workers live and
    gone; below it a filter bar takes the filters of `flow runs` (e.g. --status Failed
    --workflow orders) and the table pages through the runs (n, p). Enter opens a run: its
    steps, errors and tracebacks, waits, updates, children (enter opens one, escape comes
    back) and history. w, b and S show the workers, builds and schedules. c, t and s cancel,
    terminate or signal the selected run after a confirmation, as `flow cancel`, `flow
    terminate` and `flow signal` do; --read-only, or a database that cannot be written, offers
    none of them. Needs the tui extra (pip install 'flow-cli[tui]').
    """
    if importlib.util.find_spec("textual") is None:
        raise InputError(f"flow top needs Textual: {TUI_EXTRA}")
    state = CliState.of(ctx)
    if read_only:
        engine = state.open_engine(create=False, with_runtimes=False, read_only=True)
    else:
        try:
            engine = state.open_engine(create=False, with_runtimes=False)
        except FlowError:
            # A database this user may only read (a read-only file or mount) is still seen.
            engine = state.open_engine(create=False, with_runtimes=False, read_only=True)
            read_only = True
    from flow_cli.cli.top import TopApp

    with engine:
        TopApp(engine, read_only=read_only, refresh_seconds=refresh).run()
