"""``flow replay-check``: would build B make the decisions these histories recorded?"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from flow_cli.cli import exits
from flow_cli.cli.io import emit_json, note, one_line, out
from flow_cli.cli.options import JsonFlag
from flow_cli.cli.state import CliState
from flow_cli.errors import FlowError, InputError

if TYPE_CHECKING:
    from flow_cli.engine.replay import ReplayResult
    from flow_cli.model.events import EventEnvelope
    from flow_cli.runtime import Runtime

PROGRESS_FROM = 20
"""Show a progress bar (on a terminal) when checking at least this many histories."""


def replay_check(
    ctx: typer.Context,
    build_id: Annotated[
        str,
        typer.Option(
            "--build-id",
            metavar="B",
            help="The build to check: a build id of one of flow.toml's runtimes.",
            show_default=False,
        ),
    ],
    run_ids: Annotated[
        list[str] | None,
        typer.Argument(metavar="RUN", help="Runs in the database to check.", show_default=False),
    ] = None,
    all_runs: Annotated[
        bool, typer.Option("--all", help="Check every run in the database.")
    ] = False,
    files: Annotated[
        list[Path] | None,
        typer.Option(
            "--file",
            metavar="F",
            help="A `flow export` file to check (repeatable); needs no database.",
            show_default=False,
            dir_okay=False,
        ),
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Check that build B replays recorded histories.

    Replays each history against build B's code at every recorded decision. The code sees each
    run's recorded spec (input, patch markers); only the build id may differ. Every divergence
    (run, sequence, identity, field, recorded, produced) is listed. Made for CI: exit 0 when
    every history replays, 3 when any diverges, 1 when the check could not run (unreadable file
    or database), 2 for usage errors (nothing selected, unknown build id).
    """
    state = CliState.of(ctx)
    run_ids = run_ids or []
    files = files or []
    if all_runs and run_ids:
        raise InputError("Name runs or pass --all, not both.")
    if not (all_runs or run_ids or files):
        raise InputError("No histories selected: name RUN ids, pass --all, or --file F.")
    runtime = state.runtime(build_id)
    histories = _from_files(files)
    if all_runs or run_ids:
        histories += _from_database(state, run_ids, all_runs)
    if not histories:
        raise InputError("The database holds no runs to check.")
    results = _replay(runtime, histories)
    diverged = [r for r in results if r.divergences]
    broken = [r for r in results if r.error is not None]

    if state.want_json(json_output):
        emit_json(
            {
                "ok": not diverged and not broken,
                "build_id": build_id,
                "runs": [r.to_json() for r in results],
            }
        )
    else:
        _report(results, diverged, build_id)
    for result in broken:
        note(f"error: run {result.run_id} could not be replayed: {one_line(result.error or '')}")
    if diverged:
        raise typer.Exit(exits.DIVERGED)
    if broken:
        raise typer.Exit(exits.FAILED)


def _from_files(files: Sequence[Path]) -> list[list[EventEnvelope]]:
    from flow_cli.engine.export import load_export

    histories = []
    for path in files:
        try:
            _, events = load_export(path)
        except InputError as exc:  # the check cannot run: exit 1, not a usage error
            raise FlowError(str(exc)) from None
        histories.append(events)
    return histories


def _from_database(
    state: CliState, run_ids: Sequence[str], all_runs: bool
) -> list[list[EventEnvelope]]:
    """Every history over one connection; an unknown run id is a usage error (exit 2)."""
    with state.open_engine(create=False, with_runtimes=False) as engine:
        if all_runs:
            run_ids = [r.run_id for r in reversed(engine.list_runs())]
        return [engine.history(run_id) for run_id in run_ids]


def _replay(runtime: Runtime, histories: Sequence[list[EventEnvelope]]) -> list[ReplayResult]:
    from flow_cli.engine.replay import replay_history

    if len(histories) < PROGRESS_FROM or not sys.stderr.isatty():
        return [replay_history(runtime, h) for h in histories]
    from rich.progress import Progress

    from flow_cli.cli import render

    results = []
    with Progress(console=render.console(stderr=True), transient=True) as progress:
        task = progress.add_task("replaying", total=len(histories))
        for history in histories:
            results.append(replay_history(runtime, history))
            progress.advance(task)
    return results


def _report(results: Sequence[ReplayResult], diverged: Sequence[ReplayResult], build: str) -> None:
    noun = "history" if len(results) == 1 else "histories"
    if not diverged:
        clean = sum(r.error is None for r in results)
        verb = "replays" if len(results) == 1 else "replay"
        out(f"replay-check: {clean} of {len(results)} {noun} {verb} cleanly against build {build}")
        return
    from flow_cli.cli import render

    render.console().print(render.replay_table(diverged))
    count = sum(len(r.divergences) for r in diverged)
    verb = "diverges" if len(diverged) == 1 else "diverge"
    kinds = "divergence" if count == 1 else "divergences"
    out(
        f"replay-check: {len(diverged)} of {len(results)} {noun} {verb} from build {build} "
        f"({count} {kinds})"
    )
