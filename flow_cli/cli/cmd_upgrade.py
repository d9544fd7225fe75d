"""``flow upgrade``: re-pin open runs to another build once they replay there
(``flow_cli.ops.upgrade``)."""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Annotated

import typer

from flow_cli.cli import exits
from flow_cli.cli.filters import FilterArgs, with_filters
from flow_cli.cli.io import emit_json, note, out
from flow_cli.cli.options import JsonFlag, complete_run_id, text_argument, text_option
from flow_cli.cli.state import CliState
from flow_cli.errors import InputError, NoLiveHost

if TYPE_CHECKING:
    from flow_cli.engine.engine import Engine
    from flow_cli.ops.upgrade import UpgradeReport

FromBuild = Annotated[
    str,
    text_option(
        "--from", "B1", "The build the runs are pinned to now (its code need not be loaded)."
    ),
]
ToBuild = Annotated[
    str,
    text_option("--to", "B2", "The build to move them to: one of flow.toml's runtimes."),
]
UpgradeRuns = Annotated[
    list[str] | None,
    text_argument(
        "[RUN]...",
        "Only these runs (or - to read run ids from stdin). Default: every open run of B1 "
        "that the filters match.",
        autocompletion=complete_run_id,
    ),
]
DryRun = Annotated[
    bool,
    typer.Option("--dry-run", help="Check every run and show what would happen; change nothing."),
]
AllowUnhosted = Annotated[
    bool,
    typer.Option(
        "--allow-unhosted",
        help="Move runs even though no live worker hosts B2 (they wait until one does).",
    ),
]


@with_filters
def upgrade(
    ctx: typer.Context,
    run_ids: UpgradeRuns = None,
    *,
    from_build: FromBuild,
    to_build: ToBuild,
    dry_run: DryRun = False,
    allow_unhosted: AllowUnhosted = False,
    json_output: JsonFlag = False,
    filters: FilterArgs,
) -> None:
    """Move open runs of build B1 to build B2, each after it replays cleanly on B2.

    Each open run of B1 (or of the runs given, or those the filters match) is replayed against
    B2's code at every recorded decision, the same check as replay-check. A run that replays
    cleanly gets a build_upgraded event {"from", "to"}: from then on B2's workers decide it and
    run its steps; it keeps its patch markers. A run that moved during its check is checked
    again. The others are refused and stay on B1, with the divergences shown. Runs that ended
    are never touched. A run named that continued as new stands for its live successor.

    When no live worker hosts B2 (`flow workers`), nothing is moved and the exit code is 1:
    the runs would wait unhosted. --allow-unhosted moves them anyway (a worker hosting B2 will
    start later); --dry-run only says so.

    --json: {"upgraded": [run_id...], "refused": [{"run_id", "divergences", "reason"}],
    "skipped": [...], ...}. Exit 3 if any run was refused (with --dry-run: would be), 0
    otherwise.
    """
    from flow_cli.ops.upgrade import upgrade_runs

    if from_build == to_build:
        raise InputError(
            f"--from and --to are both {from_build!r}; name the build the runs are pinned to "
            "and the build to move them to."
        )
    ids = _run_ids(run_ids or [], filters)  # None: no RUN given; [] from an empty stdin
    state = CliState.of(ctx)
    state.runtime(to_build)  # an unknown B2 is refused before the database is opened
    where = filters.to_filter()
    # A dry run only reads: it works on a read-only database and never migrates its schema.
    with state.open_engine(create=False, with_runtimes=True, read_only=dry_run) as engine:
        if ids:
            from flow_cli.cli.bulk import follow_named

            ids = follow_named(engine, ids)
        # Moving runs to a build nobody runs strands them: refused unless asked for, but only
        # when something would move (a rerun after every run moved stays exit 0).
        unhosted = not allow_unhosted and not _hosted_live(engine, to_build)
        report = upgrade_runs(
            engine, from_build, to_build, where=where, run_ids=ids, dry_run=dry_run or unhosted
        )
        if unhosted and report.upgraded:
            if not dry_run:
                raise NoLiveHost(to_build)
            note(f"note: {NoLiveHost(to_build)}")
        report = replace(report, dry_run=dry_run)
        unknown: list[str] | None = None
        if ids is None and not (report.upgraded or report.refused or report.skipped):
            builds = sorted(u.build_id for u in engine.build_usage())
            unknown = None if from_build in builds else builds
    if state.want_json(json_output):
        emit_json(report.to_json())
    else:
        _show(report, unknown)
    if report.refused:
        raise typer.Exit(exits.DIVERGED)


def _hosted_live(engine: Engine, build_id: str) -> bool:
    """Whether a live worker (``flow worker`` or a running ``flow tick``) hosts ``build_id``."""
    now = engine.clock.now()
    return any(w.live(now) and build_id in w.builds for w in engine.list_workers())


def _run_ids(runs: list[str], filters: FilterArgs) -> list[str] | None:
    """The runs named (``-``: read from stdin, maybe none), or None when no RUN was given."""
    if not runs:
        return None
    if filters.selects:
        raise InputError("give run ids or filters, not both.")
    if runs == ["-"]:
        from flow_cli.cli.bulk import read_ids

        return list(dict.fromkeys(read_ids(sys.stdin.read())))
    if "-" in runs:
        raise InputError("- (read run ids from stdin) must be the only RUN argument.")
    return runs


def _show(report: UpgradeReport, builds_with_runs: list[str] | None = None) -> None:
    """The result table; ``builds_with_runs`` when no run at all is pinned to the --from build
    (a typo, or runs that all moved already)."""
    from flow_cli.cli import render, replay_report
    from flow_cli.engine.replay_check import ReplayResult

    moved = f"{report.from_build} → {report.to_build}"
    verb = "would upgrade" if report.dry_run else "upgraded"
    rows = [(run_id, verb, moved) for run_id in report.upgraded]
    rows += [(r.run_id, "refused", r.reason) for r in report.refused]
    rows += [(s.run_id, "skipped", s.reason) for s in report.skipped]
    total = len(rows)
    if not total:
        line = f"no open runs of build {report.from_build} to upgrade; nothing done"
        if builds_with_runs is not None:
            known = ", ".join(builds_with_runs) or "none"
            line += f" (no run is pinned to {report.from_build}; builds with runs: {known})"
        note(line)
        return
    console = render.console()
    console.print(render.upgrade_table(rows))
    diverged = [
        ReplayResult(run_id=r.run_id, ok=False, divergences=r.divergences)
        for r in report.refused
        if r.divergences
    ]
    if diverged:
        console.print(replay_report.table(replay_report.group(diverged)))
    runs = "run" if total == 1 else "runs"
    done = "would be re-pinned" if report.dry_run else "re-pinned"
    line = f"upgrade: {len(report.upgraded)} of {total} {runs} {done} to build {report.to_build}"
    if report.refused:
        line += f", {len(report.refused)} refused (they stay on {report.from_build})"
    if report.skipped:
        line += f", {len(report.skipped)} skipped"
    out(line + ("; dry run: nothing changed" if report.dry_run else ""))
    if report.rechecked:
        note(f"{report.rechecked} check(s) made again: the run moved while it was checked")
