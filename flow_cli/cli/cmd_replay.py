"""``flow replay-check``: would build B make the decisions these histories recorded?"""

from __future__ import annotations

import glob
import sys
from collections.abc import Sequence
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from flow_cli.cli import exits
from flow_cli.cli.io import emit_json, note, one_line, out
from flow_cli.cli.options import JsonFlag, text_argument, text_option
from flow_cli.cli.state import CliState
from flow_cli.errors import InputError

if TYPE_CHECKING:
    from flow_cli.cli.replay_report import Group
    from flow_cli.engine.replay_check import ReplayResult
    from flow_cli.model.events import EventEnvelope
    from flow_cli.runtime import Runtime

PROGRESS_FROM = 20
"""Show a progress bar (on a terminal) when checking at least this many histories."""


class ReportFormat(StrEnum):
    TEXT = "text"
    GITHUB = "github"


def replay_check(
    ctx: typer.Context,
    build_id: Annotated[
        str | None,
        text_option(
            "--build-id",
            "B",
            "The build to check: a build id of one of flow.toml's runtimes "
            "(default: flow.toml's build_id).",
        ),
    ] = None,
    run_ids: Annotated[
        list[str] | None,
        text_argument("RUN", "Runs in the database to check."),
    ] = None,
    all_runs: Annotated[
        bool, typer.Option("--all", help="Check every run in the database.")
    ] = False,
    files: Annotated[
        list[str] | None,
        text_option(
            "--file",
            "F",
            "`flow export` files to check: files, directories (every *.json below) or "
            "globs such as 'histories/**/*.json' (repeatable); needs no database. Regular "
            "files of at most 64 MiB only.",
        ),
    ] = None,
    report_format: Annotated[
        ReportFormat,
        typer.Option(
            "--format",
            metavar="text|github",
            help="text (a table) or github (::error annotations for GitHub Actions).",
        ),
    ] = ReportFormat.TEXT,
    json_output: JsonFlag = False,
) -> None:
    """Check that build B replays recorded histories.

    Replays each history against build B's code at every recorded decision. The code sees each
    run's recorded spec (input, patch markers); only the build id may differ. Identical
    divergences (identity, field, recorded -> produced) are grouped with the number of runs and
    sample runs; produced commands are named by the event they would record, and long values
    are shown around the first differing character. Made for CI: exit 0 when every history
    replays, 3 when any diverges, 2 when a file could not be read or for usage errors, 1 when
    the database could not be read. Each bad file (not a regular file, over 64 MiB, not JSON,
    another format version, a history not numbered 1, 2, 3, ...) gets its own error line and
    the others are still checked; a divergence among them still exits 3 (it stands whatever
    the other files hold), otherwise a bad file makes it 2.
    """
    state = CliState.of(ctx)
    run_ids = run_ids or []
    files = files or []
    if all_runs and run_ids:
        raise InputError("Name runs or pass --all, not both.")
    if not (all_runs or run_ids or files):
        raise InputError("No histories selected: name RUN ids, pass --all, or --file F.")
    if build_id is None:
        build_id = state.config.build_id
        if build_id is None:
            raise InputError(
                "No build to check: pass --build-id B, or set build_id in flow.toml's [flow]."
            )
    runtime = state.runtime(build_id)
    redacted: list[frozenset[str]] = []
    histories, origins, unreadable = _from_files(files, redacted)
    if all_runs or run_ids:
        histories += _from_database(state, run_ids, all_runs)
    if not histories and not unreadable:
        raise InputError("The database holds no runs to check.")
    results = _replay(runtime, histories)
    results = _comparable(results, redacted)
    diverged = [r for r in results if r.divergences]
    broken = [r for r in results if r.error is not None]
    from flow_cli.cli import replay_report

    groups = replay_report.group(diverged)
    if state.want_json(json_output):
        document: dict[str, object] = {
            "ok": not diverged and not broken and not unreadable,
            "build_id": build_id,
            "runs": [r.to_json() for r in results],
        }
        if groups:
            document["groups"] = [g.to_json() for g in groups]
        if unreadable:
            document["unreadable"] = [{"file": f, "error": e} for f, e in unreadable]
        emit_json(document)
    else:
        if report_format is ReportFormat.GITHUB:
            for line in replay_report.github(groups, build_id, origins):
                out(line)
            for path, error in unreadable:
                out(replay_report.github_file_error(path, error))
        elif diverged:
            from flow_cli.cli import render

            render.console().print(replay_report.table(groups))
        _summary(results, diverged, groups, build_id, len(unreadable))
    for _path, error in unreadable:
        note(f"error: {error}")
    for result in broken:
        note(f"error: run {result.run_id} could not be replayed: {one_line(result.error or '')}")
    if diverged:
        raise typer.Exit(exits.DIVERGED)
    if unreadable:
        raise typer.Exit(exits.USAGE)
    if broken:
        raise typer.Exit(exits.FAILED)


def expand(patterns: Sequence[str]) -> tuple[list[Path], list[tuple[str, str]]]:
    """Files named by ``--file`` values (files, directories, globs), and those that match
    nothing."""
    found: list[Path] = []
    missing: list[tuple[str, str]] = []
    for pattern in patterns:
        path = Path(pattern).expanduser()
        if any(c in pattern for c in "*?["):
            matches = sorted(Path(p) for p in glob.glob(str(path), recursive=True))
            # Everything but directories: a FIFO, a device or a dangling link among them is
            # reported as unreadable, never skipped in silence.
            files = [p for p in matches if not p.is_dir()]
            if not files:
                missing.append((pattern, f"--file {pattern}: the pattern matches no file"))
            found.extend(files)
        elif path.is_dir():
            files = sorted(p for p in path.rglob("*.json") if not p.is_dir())
            if not files:
                missing.append((pattern, f"--file {pattern}: the directory holds no *.json file"))
            found.extend(files)
        else:
            found.append(path)
    return list(dict.fromkeys(found)), missing


def _from_files(
    patterns: Sequence[str], redacted: list[frozenset[str]]
) -> tuple[list[list[EventEnvelope]], dict[str, str], list[tuple[str, str]]]:
    """Histories read, the file each run came from, and (file, error) for each unreadable one.

    ``redacted`` receives, per history read, what its export left out (see ``export``).
    """
    from flow_cli.engine.export import read_export

    paths, unreadable = expand(patterns)
    histories = []
    origins: dict[str, str] = {}
    for path in paths:
        try:
            exported = read_export(path)
        except InputError as exc:
            unreadable.append((str(path), str(exc)))
            continue
        histories.append(exported.events)
        redacted.append(exported.redacted)
        origins.setdefault(exported.run_id, str(path))
    return histories, origins, unreadable


def _comparable(
    results: list[ReplayResult], redacted: Sequence[frozenset[str]]
) -> list[ReplayResult]:
    """Drop what a redacted export cannot decide (histories from files come first)."""
    from flow_cli.engine.export import comparable

    return [
        comparable(result, redacted[i]) if i < len(redacted) else result
        for i, result in enumerate(results)
    ]


def _from_database(
    state: CliState, run_ids: Sequence[str], all_runs: bool
) -> list[list[EventEnvelope]]:
    """Every history over one connection; an unknown run id is a usage error (exit 2)."""
    with state.open_engine(create=False, with_runtimes=False, read_only=True) as engine:
        if all_runs:
            run_ids = [r.run_id for r in reversed(engine.list_runs())]
        return [engine.history(run_id) for run_id in run_ids]


def _replay(runtime: Runtime, histories: Sequence[list[EventEnvelope]]) -> list[ReplayResult]:
    from flow_cli.engine.replay_check import replay_history

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


def _summary(
    results: Sequence[ReplayResult],
    diverged: Sequence[ReplayResult],
    groups: Sequence[Group],
    build: str,
    unreadable: int,
) -> None:
    noun = "history" if len(results) == 1 else "histories"
    # A clean verdict over the files that could be read must not read as a clean verdict over
    # all of them.
    files = "file" if unreadable == 1 else "files"
    skipped = f"; {unreadable} {files} could not be read" if unreadable else ""
    if not diverged:
        clean = sum(r.error is None for r in results)
        verb = "replays" if len(results) == 1 else "replay"
        out(
            f"replay-check: {clean} of {len(results)} {noun} {verb} cleanly against build "
            f"{build}{skipped}"
        )
        return
    count = len(groups)
    verb = "diverges" if len(diverged) == 1 else "diverge"
    kinds = "distinct divergence" if count == 1 else "distinct divergences"
    out(
        f"replay-check: {len(diverged)} of {len(results)} {noun} {verb} from build {build} "
        f"({count} {kinds}){skipped}"
    )
