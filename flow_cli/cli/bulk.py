"""What the verbs that act on many runs share: choosing the runs, acting on each with one result
line, ``--dry-run`` and ``--yes``.

Targets are run ids on the command line, ``-`` (ids from stdin, one a line; JSON lines from
``flow runs --jsonl`` work too), or the filters of ``flow runs``. ``--dry-run`` lists the targets
and changes nothing; acting on more than one run matched by filters needs ``--yes``. Each run
gets one result line (``--json``: an array, ``--jsonl``: one object a line); a progress bar runs
on stderr when it is a terminal; the exit code is 1 if any run failed.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer

from flow_cli.cli.filters import FilterArgs
from flow_cli.cli.io import emit_json, note, out_row
from flow_cli.cli.options import complete_run_id
from flow_cli.cli.state import CliState
from flow_cli.errors import InputError

if TYPE_CHECKING:
    from flow_cli.engine.engine import Engine
    from flow_cli.ops.bulk import BulkResult

RunsArg = Annotated[
    list[str] | None,
    typer.Argument(
        metavar="[RUN]...",
        help="Run ids, or - to read them from stdin (one a line). Or leave them out and select "
        "runs with the filters.",
        show_default=False,
        autocompletion=complete_run_id,
    ),
]
DryRun = Annotated[
    bool, typer.Option("--dry-run", help="List the runs that would be acted on; change nothing.")
]
Yes = Annotated[
    bool, typer.Option("--yes", "-y", help="Act on every run the filters match (needed for >1).")
]
Reason = Annotated[
    str | None,
    typer.Option("--reason", metavar="TEXT", help="Why; recorded in the history."),
]


def read_ids(text: str, key: str = "run_id") -> list[str]:
    """Run ids (or other ids, by ``key``) from stdin: one a line, or JSON objects with a
    ``run_id`` (``--jsonl`` output).

    Blank lines are skipped; there is no comment syntax, since a run id may begin with ``#``.
    """
    ids: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                value = json.loads(line).get(key)
            except (ValueError, AttributeError):
                value = None
            if not isinstance(value, str):
                raise InputError(f'stdin line {number}: a JSON line must have a "{key}".')
            line = value
        ids.append(line)
    return ids


class Targets:
    """The runs a verb acts on, and how they were chosen."""

    def __init__(self, ids: list[str], by_filter: bool, records: dict[str, Any]) -> None:
        self.ids = ids
        self.by_filter = by_filter
        self.records = records


def select(
    engine: Engine,
    runs: list[str],
    filters: FilterArgs,
    *,
    follow: bool = False,
    every: bool = False,
) -> Targets:
    """The targets; with ``follow``, each run named (not matched by filters) that continued as
    new stands for its live successor (said on stderr), as for every verb that names a run.
    ``every`` (``--all``) selects every run, as filters that match them all would."""
    if every and (runs or filters.selects):
        raise InputError("--all selects every run; drop the run ids and filters (or --all).")
    if runs and filters.selects:
        raise InputError("give run ids or filters, not both.")
    if runs == ["-"]:
        return Targets(_named(engine, read_ids(sys.stdin.read()), follow), False, {})
    if "-" in runs:
        raise InputError("- (read run ids from stdin) must be the only RUN argument.")
    if runs:
        return Targets(_named(engine, runs, follow), False, {})
    if not filters.selects and not every:
        raise InputError(
            "say which runs: give RUN ids, - to read them from stdin, or filters such as "
            "--status, --workflow, --failing (see --help)."
        )
    records = engine.find_runs(filters.to_filter())
    return Targets([r.run_id for r in records], True, {r.run_id: r for r in records})


def _named(engine: Engine, runs: list[str], follow: bool) -> list[str]:
    return follow_named(engine, runs) if follow else list(dict.fromkeys(runs))


def follow_one(engine: Engine, run_id: str) -> str:
    """The live run of ``run_id``'s continue-as-new chain, a note on stderr when it differs;
    ``RunNotFound`` for an unknown run (one RUN is exit 2)."""
    from flow_cli.ops.chain import follow

    live, message = follow(engine, run_id)
    if message is not None:
        note(message)
    return live


def follow_named(engine: Engine, runs: list[str]) -> list[str]:
    """Each run named, or its live successor when it continued as new (said on stderr);
    once each."""
    from flow_cli.ops.chain import follow_each

    live: list[str] = []
    for run_id, message in follow_each(engine, list(dict.fromkeys(runs))):
        if message is not None:
            note(message)
        live.append(run_id)
    return list(dict.fromkeys(live))


def act_on_all(
    state: CliState,
    engine: Engine,
    ids: list[str],
    *,
    verb: str,
    as_json: bool,
    jsonl: bool,
    results: Callable[[list[str]], Iterator[BulkResult]],
) -> None:
    """``act`` on runs named one by one (from a file or stdin): no dry run, no confirmation."""
    act(
        state,
        engine,
        Targets(ids, False, {}),
        verb=verb,
        dry_run=False,
        yes=True,
        as_json=as_json,
        jsonl=jsonl,
        results=results,
    )


def act(
    state: CliState,
    engine: Engine,
    targets: Targets,
    *,
    verb: str,
    dry_run: bool,
    yes: bool,
    as_json: bool,
    jsonl: bool,
    results: Callable[[list[str]], Iterator[BulkResult]],
) -> None:
    """Dry run, confirmation, then one result line per run and the exit code."""
    ids = targets.ids
    if dry_run:
        if _print_dry_run(engine, targets, as_json, jsonl):
            raise typer.Exit(1)  # as the real command: a run that does not exist fails
        return
    if not ids:
        if as_json and not jsonl:
            emit_json([])
        note(f"no runs to {verb}; nothing done")
        return
    if targets.by_filter and len(ids) > 1 and not yes:
        raise InputError(
            f"{len(ids)} runs match the filters; add --yes to {verb} them all, or --dry-run "
            "to list them first."
        )
    collected: list[dict[str, str]] = []
    counts = {"done": 0, "skipped": 0, "failed": 0}
    with _progress(len(ids), verb) as advance:
        for result in results(ids):
            counts[result.outcome.value] += 1
            if as_json and not jsonl:
                collected.append(result.to_json())
            elif jsonl:
                emit_json(result.to_json(), compact=True)
            else:
                out_row(result.run_id, result.outcome.value, result.detail)
            advance()
    if as_json and not jsonl:
        emit_json(collected)
    if len(ids) > 1 or counts["failed"]:
        note(f"{counts['done']} done, {counts['skipped']} skipped, {counts['failed']} failed")
    if counts["failed"]:
        raise typer.Exit(1)


def _print_dry_run(engine: Engine, targets: Targets, as_json: bool, jsonl: bool) -> int:
    """List the targets (workflow and status) and say which do not exist; return how many."""
    rows = []
    missing = 0
    for run_id in targets.ids:
        record = targets.records.get(run_id) or engine.find_run(run_id)
        row: dict[str, Any] = {"run_id": run_id}
        if record is not None:
            row.update(workflow=record.workflow, status=record.status.value)
        else:
            missing += 1
            row.update(error="does not exist")
        rows.append(row)
    if jsonl:
        for row in rows:
            emit_json(row, compact=True)
    elif as_json:
        emit_json(rows)
    else:
        for row in rows:
            out_row(*(str(v) for v in row.values()))
    if (not as_json and not jsonl) or missing:
        acted = len(rows) - missing
        gone = f"; {missing} do{'es' if missing == 1 else ''} not exist" if missing else ""
        note(f"dry run: {acted} run{'s' if acted != 1 else ''} would be acted on{gone}")
    return missing


def dry_run_one(ctx: typer.Context, run_id: str, as_json: bool, *, follow: bool = True) -> None:
    """``--dry-run`` with one RUN: as the real command, an unknown run is exit 2, and a run that
    continued as new stands for its live successor (``follow``: the verbs that act on runs)."""
    state = CliState.of(ctx)
    with state.open_engine(create=False, with_runtimes=False, read_only=True) as engine:
        engine.get_run(run_id)
        if follow:
            run_id = follow_named(engine, [run_id])[0]
        _print_dry_run(engine, Targets([run_id], False, {}), state.want_json(as_json), False)


class _progress:
    """A Rich progress bar on stderr when it is a terminal; a no-op otherwise."""

    def __init__(self, total: int, verb: str) -> None:
        self.total = total
        self.verb = verb
        self._bar: Any = None

    def __enter__(self) -> Callable[[], None]:
        if self.total < 2 or not sys.stderr.isatty():
            return lambda: None
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        from flow_cli.cli.render import console

        self._bar = Progress(
            TextColumn(f"{self.verb}"),
            BarColumn(),
            MofNCompleteColumn(),
            console=console(stderr=True),
            transient=True,
        )
        self._bar.start()
        task = self._bar.add_task(self.verb, total=self.total)
        return lambda: self._bar.advance(task)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()


# -- the verbs -------------------------------------------------------------------------------
