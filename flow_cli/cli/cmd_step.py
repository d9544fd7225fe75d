"""``flow step resolve``: settle a step whose outcome is unknown (DESIGN §2.5).

Every argument is checked before the database is opened: a bad command line writes nothing.
"""

from __future__ import annotations

from typing import Annotated

import typer

from flow_cli.cli.bulk import open_live
from flow_cli.cli.io import emit_json, out, parse_json_arg
from flow_cli.cli.options import JsonFlag, RunArg, text_option
from flow_cli.cli.state import CliState
from flow_cli.errors import InputError
from flow_cli.model.names import escape_controls

step_app = typer.Typer(
    name="step",
    help="Work with a run's steps: resolve one whose outcome is unknown.",
    no_args_is_help=True,
)


@step_app.command("resolve")
def step_resolve(
    ctx: typer.Context,
    run_id: RunArg,
    step_id: Annotated[str, typer.Argument(metavar="STEP", help="The step id (see `flow show`).")],
    output: Annotated[
        str | None,
        text_option(
            "--output", "JSON|@FILE|-", "The step completed with this output (checked outside)."
        ),
    ] = None,
    fail: Annotated[
        bool, typer.Option("--fail", help="The step failed for good (no more attempts).")
    ] = False,
    error: Annotated[
        str | None,
        text_option("--error", "JSON", 'With --fail: the error, e.g. {"type": "Declined"}.'),
    ] = None,
    retry: Annotated[
        bool, typer.Option("--retry", help="Nothing happened outside: run a new attempt now.")
    ] = False,
    reason: Annotated[
        str | None, text_option("--reason", "TEXT", "Why, recorded with the resolution.")
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Resolve STEP of RUN, whose attempt's outcome is unknown (an on_lost="unknown" step whose
    worker vanished or that timed out; `flow doctor` says step-unknown).

    Exactly one of --output J (step_completed), --fail [--error J] (step_failed, exhausted) or
    --retry (a new attempt now). The resolution is fenced by the attempt: if the step is not
    unknown (or someone settled it first), nothing is written and the exit status is 1.
    """
    from flow_cli.engine.resolve import Resolution

    chosen = [
        flag
        for flag, given in (("--output", output is not None), ("--fail", fail), ("--retry", retry))
        if given
    ]
    if len(chosen) != 1:
        raise InputError("give exactly one of --output JSON, --fail or --retry")
    if error is not None and not fail:
        raise InputError("--error goes with --fail")
    value = None
    resolution = Resolution.RETRY
    if output is not None:
        resolution, value = Resolution.OUTPUT, parse_json_arg(output, "--output")
    elif fail:
        resolution = Resolution.FAIL
        value = None if error is None else parse_json_arg(error, "--error")
    state = CliState.of(ctx)
    with open_live(state, run_id) as (engine, run_id):
        done = engine.resolve_step(
            run_id, step_id, resolution, value, reason or "resolved by operator"
        )
    if state.want_json(json_output):
        emit_json(
            {
                "run_id": done.run_id,
                "step_id": done.step_id,
                "attempt": done.attempt,
                "resolution": done.resolution.value,
            }
        )
    else:
        out(
            f"step {step_id!r} of run {escape_controls(run_id)} resolved: "
            f"{done.resolution.value} (attempt {done.attempt})"
        )
