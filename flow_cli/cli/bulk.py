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
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import KW_ONLY, dataclass, replace
from typing import TYPE_CHECKING, Annotated, Any

import typer

from flow_cli.cli.filters import FilterArgs
from flow_cli.cli.io import dumps, emit_json, note, out_row
from flow_cli.cli.options import complete_run_id, text_argument
from flow_cli.cli.state import CliState
from flow_cli.errors import InputError

if TYPE_CHECKING:
    from flow_cli.engine.engine import Engine
    from flow_cli.ops.bulk import BulkResult
    from flow_cli.store.protocol import RunFilter, RunRecord

RunsArg = Annotated[
    list[str] | None,
    text_argument(
        "[RUN]...",
        "Run ids, or - to read them from stdin (one a line). Or leave them out and select "
        "runs with the filters.",
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


@dataclass(frozen=True, slots=True)
class Targets:
    """The runs a verb acts on, and how they were chosen: ids named (a list), or the runs
    filters select, read a page at a time when walked (``rows``), never all at once. A page is
    read when the verb reaches it: a run that stops or starts matching the filters meanwhile
    (another process moved it) is left out or acted on as that page finds it, as it would be
    had it moved before the command began."""

    _ids: list[str]
    by_filter: bool = False
    _: KW_ONLY
    engine: Engine | None = None
    where: RunFilter | None = None
    page_size: int | None = None

    def rows(self) -> Iterator[tuple[str, RunRecord | None]]:
        """Each run id with its index row when filters selected it (``None`` for ids named:
        look them up), in order; filters: read a page at a time."""
        if self.engine is None or self.where is None:
            yield from ((run_id, None) for run_id in self._ids)
            return
        from flow_cli.engine import paging

        size = self.page_size or paging.PAGE_SIZE
        yield from ((r.run_id, r) for r in paging.paged(self.engine.find_runs, self.where, size))

    def ids(self) -> Iterator[str]:
        """The run ids, in order (filters: a page at a time)."""
        return (run_id for run_id, _ in self.rows())

    def named(self) -> list[str]:
        """The ids named (empty when filters select the runs)."""
        return self._ids

    def first(self, n: int) -> list[str]:
        """At most the first ``n`` ids (filters: one query of at most ``n`` runs)."""
        if self.engine is None or self.where is None:
            return self._ids[:n]
        limit = n if self.where.limit is None else min(n, self.where.limit)
        return [r.run_id for r in self.engine.find_runs(replace(self.where, limit=limit))]

    def count(self) -> int:
        """How many runs are selected: filters without a cursor or a limit are counted by the
        database (``count_runs``), with one by a walk of the pages (holding one)."""
        if self.engine is None or self.where is None:
            return len(self._ids)
        if self.where.limit is None and self.where.after is None:
            return self.engine.count_runs(self.where).total
        return sum(1 for _ in self.ids())


def select(
    engine: Engine,
    runs: list[str],
    filters: FilterArgs,
    *,
    follow: bool = False,
    every: bool = False,
    page_size: int | None = None,
) -> Targets:
    """The targets; with ``follow``, each run named (not matched by filters) that continued as
    new stands for its live successor (said on stderr), as for every verb that names a run.
    ``every`` (``--all``) selects every run, as filters that match them all would. Runs that
    filters select are read when acted on, ``page_size`` at a time."""
    if every and (runs or filters.selects):
        raise InputError("--all selects every run; drop the run ids and filters (or --all).")
    if runs and filters.selects:
        raise InputError("give run ids or filters, not both.")
    if runs == ["-"]:
        return Targets(_named(engine, read_ids(sys.stdin.read()), follow))
    if "-" in runs:
        raise InputError("- (read run ids from stdin) must be the only RUN argument.")
    if runs:
        return Targets(_named(engine, runs, follow))
    if not filters.selects and not every:
        raise InputError(
            "say which runs: give RUN ids, - to read them from stdin, or filters such as "
            "--status, --workflow, --failing (see --help)."
        )
    return Targets([], True, engine=engine, where=filters.to_filter(), page_size=page_size)


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


@contextmanager
def open_live(
    state: CliState, run_id: str, *, with_runtimes: bool = False, read_only: bool = False
) -> Iterator[tuple[Engine, str]]:
    """The engine on the existing database, and the live run of ``run_id``'s chain
    (``follow_one``): what a verb on one RUN acts on."""
    with state.open_engine(
        create=False, with_runtimes=with_runtimes, read_only=read_only
    ) as engine:
        yield engine, follow_one(engine, run_id)


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
        Targets(ids),
        verb=verb,
        dry_run=False,
        yes=True,
        as_json=as_json,
        jsonl=jsonl,
        results=lambda named: results(list(named)),
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
    results: Callable[[Iterable[str]], Iterator[BulkResult]],
) -> None:
    """Dry run, confirmation, then one result line per run and the exit code. Runs selected
    by filters stream: each result is written as it comes (``--json``: the array too), so
    memory is flat in the number of runs."""
    if dry_run:
        if _print_dry_run(engine, targets, as_json, jsonl):
            raise typer.Exit(1)  # as the real command: a run that does not exist fails
        return
    if not targets.first(1):
        if as_json and not jsonl:
            emit_json([])
        note(f"no runs to {verb}; nothing done")
        return
    if targets.by_filter and not yes and len(targets.first(2)) > 1:
        raise InputError(
            f"{targets.count()} runs match the filters; add --yes to {verb} them all, or "
            "--dry-run to list them first."
        )
    counts = {"done": 0, "skipped": 0, "failed": 0}
    array = _JsonArray() if as_json and not jsonl else None
    with _progress(targets, verb) as advance:
        for result in results(targets.ids()):
            counts[result.outcome.value] += 1
            if array is not None:
                array.add(result.to_json())
            elif jsonl:
                emit_json(result.to_json(), compact=True)
            else:
                out_row(result.run_id, result.outcome.value, result.detail)
            advance()
    if array is not None:
        array.close()
    if sum(counts.values()) > 1 or counts["failed"]:
        note(f"{counts['done']} done, {counts['skipped']} skipped, {counts['failed']} failed")
    if counts["failed"]:
        raise typer.Exit(1)


class _JsonArray:
    """A JSON array written to stdout an item at a time, the bytes ``emit_json(list)`` would
    write for the whole list (indented by two, flushed at the end)."""

    def __init__(self) -> None:
        self._items = 0

    def add(self, value: Any) -> None:
        item = dumps(value).replace("\n", "\n  ")
        sys.stdout.write(("[\n  " if not self._items else ",\n  ") + item)
        self._items += 1

    def close(self) -> None:
        sys.stdout.write("[]\n" if not self._items else "\n]\n")
        sys.stdout.flush()


def _print_dry_run(engine: Engine, targets: Targets, as_json: bool, jsonl: bool) -> int:
    """List the targets (workflow and status) and say which do not exist; return how many."""
    missing = 0
    listed = 0
    array = _JsonArray() if as_json and not jsonl else None
    for run_id, known in targets.rows():
        record = known or engine.find_run(run_id)
        row: dict[str, Any] = {"run_id": run_id}
        if record is not None:
            row.update(workflow=record.workflow, status=record.status.value)
        else:
            missing += 1
            row.update(error="does not exist")
        listed += 1
        if jsonl:
            emit_json(row, compact=True)
        elif array is not None:
            array.add(row)
        else:
            out_row(*(str(v) for v in row.values()))
    if array is not None:
        array.close()
    if (not as_json and not jsonl) or missing:
        acted = listed - missing
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
        _print_dry_run(engine, Targets([run_id]), state.want_json(as_json), False)


class _progress:
    """A Rich progress bar on stderr when it is a terminal; a no-op otherwise."""

    def __init__(self, targets: Targets, verb: str) -> None:
        self.targets = targets
        self.verb = verb
        self._bar: Any = None

    def __enter__(self) -> Callable[[], None]:
        if not sys.stderr.isatty() or len(self.targets.first(2)) < 2:
            return lambda: None
        self.total = self.targets.count()  # a walk of the ids, for the bar's length
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
