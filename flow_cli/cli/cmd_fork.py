"""``flow fork``: re-run a run, whole or from a step (``flow_cli.ops.fork``)."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from flow_cli.cli import exits
from flow_cli.cli.io import emit_json, note, one_line, out, parse_json_arg, short_json
from flow_cli.cli.options import JsonFlag, RunArg, text_option
from flow_cli.cli.state import CliState
from flow_cli.cli.words import plural
from flow_cli.errors import InputError
from flow_cli.model.names import escape_controls


def fork(
    ctx: typer.Context,
    run_id: RunArg,
    new_id: Annotated[
        str | None, text_option("--id", "NEW", "The new run's id (default: RUN-fork-<random>).")
    ] = None,
    input: Annotated[
        str | None,
        text_option(
            "--input", "JSON|@FILE|-", "Another input for the new run (default: the original's)."
        ),
    ] = None,
    build_id: Annotated[
        str | None,
        text_option(
            "--build-id", "B", "Run the fork under this loaded build (default: the original's)."
        ),
    ] = None,
    from_step: Annotated[
        str | None,
        text_option(
            "--from-step",
            "STEP_ID",
            "Keep the steps completed before STEP_ID was first scheduled (not invoked "
            "again); STEP_ID and everything after it run anew.",
        ),
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Start a new run from RUN's spec, optionally with another input or build.

    run_started records "forked_from": {"run_id", "sequence"}. With --from-step, the new
    history is replayed against its build before it is written; a fork whose copied decisions
    the code would not make again is refused (exit 3) with the divergences. The original run is
    never changed. --json: {"run_id", "forked_from"}.

    A fork from a step keeps the original's times in its history (ctx.started_at, and the
    deadlines derived from it, read as they did), but is listed as new: flow runs and --since
    go by when it was forked.
    """
    from flow_cli.errors import ForkDiverges
    from flow_cli.ops.fork import fork_run

    if new_id == "":
        raise InputError("--id is empty; give the new run id, or leave --id out.")
    options = {} if input is None else {"input": parse_json_arg(input, "--input")}
    state = CliState.of(ctx)
    with state.open_engine(create=False, with_runtimes=True) as engine:
        try:
            forked = fork_run(
                engine,
                run_id,
                new_id=new_id,
                build_id=build_id,
                from_step=from_step,
                **options,
            )
        except ForkDiverges as refused:
            sys.stdout.flush()
            sys.stderr.write(f"error: {one_line(str(refused))}\n")
            for d in refused.divergences:
                note(
                    f"  seq {d.sequence} {d.identity} {d.field}: "
                    f"{short_json(d.recorded, 50)} -> {short_json(d.produced, 50)}"
                )
            raise typer.Exit(exits.DIVERGED) from None
    if state.want_json(json_output):
        emit_json(forked.to_json())
    else:
        out(escape_controls(forked.run_id))
        origin, sequence = forked.forked_from
        note(
            f"forked run {origin} (up to event {sequence}, "
            f"{plural(forked.copied, 'event')} copied) as {forked.run_id}"
        )
