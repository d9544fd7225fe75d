"""``flow prune`` (delete ended runs, archiving them first when asked) and ``flow archive
verify`` (check an archive against its manifest). The rules are in ``engine.retention`` and
``engine.archive``."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from flow_cli.cli.bulk import DryRun, Yes
from flow_cli.cli.filters import FilterArgs, parse_time, with_filters
from flow_cli.cli.io import emit_json, note, out, out_row
from flow_cli.cli.options import JsonFlag, text_argument, text_option
from flow_cli.cli.state import CliState
from flow_cli.cli.words import plural
from flow_cli.errors import InputError

if TYPE_CHECKING:
    from flow_cli.engine.retention import PruneReport

archive_app = typer.Typer(
    name="archive",
    help="Archives that `flow prune --archive DIR` writes: check them against their manifest.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


@with_filters
def prune(
    ctx: typer.Context,
    ended_before: Annotated[
        str,
        text_option(
            "--ended-before",
            "AGE",
            "Only runs that ended longer ago than AGE (30d, 12h) or before a time "
            "(ISO 8601). Required.",
        ),
    ],
    archive: Annotated[
        Path | None,
        text_option(
            "--archive",
            "DIR",
            "Write each history to DIR/<ended date>/<run>.json (the `flow export` format) "
            "with a sha256 in DIR/MANIFEST.jsonl, on disk before the run is deleted.",
        ),
    ] = None,
    dry_run: DryRun = False,
    yes: Yes = False,
    json_output: JsonFlag = False,
    *,
    filters: FilterArgs,
) -> None:
    """Delete ended runs, with their whole families.

    Never an open run: a parent goes with its children, and a continue-as-new chain with all
    its runs, once every one of them has ended before AGE. Deletes in small transactions (a
    worker never waits long), gives the space back (SQLite), and can be stopped at any point:
    run it again to finish. With --archive DIR, no run is deleted before its history is on
    disk in DIR. Needs --yes when runs match (or --dry-run to list them).
    """
    from datetime import UTC, datetime

    from flow_cli.engine.archive import check_writable
    from flow_cli.engine.retention import PruneRequest, selection

    now = datetime.now(UTC)
    cutoff = parse_time(ended_before, "--ended-before", now)
    where = filters.to_filter(now)
    if where.statuses and not any(s.terminal for s in where.statuses):
        raise InputError(
            "prune deletes only ended runs: give --status Completed, Failed, Cancelled or "
            "ContinuedAsNew (or no --status)."
        )
    if archive is not None:
        archive = archive.expanduser()
        check_writable(archive)
    state = CliState.of(ctx)
    as_json = state.want_json(json_output)
    request = PruneRequest(where=where, ended_before=cutoff, archive=archive)
    with state.open_engine(create=False, with_runtimes=False) as engine:
        if not dry_run and not yes:
            matched = engine.count_runs(selection(where, cutoff)).total
            if matched:
                raise InputError(
                    f"{plural(matched, 'ended run')} match; add --yes to prune them (with their "
                    "families), or --dry-run to list them first."
                )
        report = engine.prune(request, dry_run=dry_run)
    _report(report, dry_run=dry_run, as_json=as_json, archive=archive)


def _report(report: PruneReport, *, dry_run: bool, as_json: bool, archive: Path | None) -> None:
    if as_json:
        emit_json(
            {
                "dry_run": dry_run,
                "pruned": len(report.pruned),
                "archived": report.archived,
                "kept": report.kept,
                "batches": report.batches,
                "longest_batch_ms": round(report.longest_batch_ms, 1),
                "runs": report.pruned,
            }
        )
        return
    if dry_run:
        for record in report.records:
            out_row(record.run_id, record.workflow, record.status.value)
        note(
            f"would prune {plural(len(report.pruned), 'run')}"
            + (f"; {report.kept} kept (their family has a run open or ended since)")
            * bool(report.kept)
        )
        return
    line = f"pruned {plural(len(report.pruned), 'run')}"
    if archive is not None:
        line += f", archived to {archive}"
    if report.kept:
        line += f"; {report.kept} kept (their family has a run open or ended since)"
    out(line)


@archive_app.command("verify")
def verify(
    ctx: typer.Context,
    directory: Annotated[Path, text_argument("DIR", "The archive directory.")],
    json_output: JsonFlag = False,
) -> None:
    """Check an archive: every file its MANIFEST.jsonl lists is there with its sha256, and no
    other file is. One line per problem and exit 1; exit 0 when all is well."""
    from flow_cli.engine.archive import verify as check

    found = check(directory.expanduser())
    state = CliState.of(ctx)
    if state.want_json(json_output):
        emit_json(
            {
                "ok": not found.problems,
                "files": found.files,
                "runs": found.runs,
                "bytes": found.bytes,
                "problems": list(found.problems),
            }
        )
    else:
        for problem in found.problems:
            out(problem)
        if not found.problems:
            out(f"{directory}: {plural(found.files, 'file')} of {plural(found.runs, 'run')} ok")
    if found.problems:
        raise typer.Exit(1)
