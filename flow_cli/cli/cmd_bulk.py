"""Acting on runs, one or many: ``cancel``, ``terminate``, ``signal``, ``export`` and
``start --from-jsonl``.

Targets are run ids on the command line, ``-`` (ids from stdin, one a line; JSON lines from
``flow runs --jsonl`` work too), or the filters of ``flow runs``. ``--dry-run`` lists the targets
and changes nothing; acting on more than one run matched by filters needs ``--yes``. Each run
gets one result line (``--json``: an array, ``--jsonl``: one object a line); a progress bar runs
on stderr when it is a terminal; the exit code is 1 if any run failed.

With exactly one run id and no filters, ``cancel``, ``signal`` and ``export`` behave as they
always did (their single-run output and exit codes are unchanged).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from flow_cli.cli import cmd_facts, cmd_read
from flow_cli.cli.cmd_triage import JsonlFlag
from flow_cli.cli.filters import FilterArgs, with_filters
from flow_cli.cli.io import dumps, emit_json, note, out_row, parse_json_arg
from flow_cli.cli.options import JsonFlag, Payload, SignalKey, complete_run_id
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


def read_ids(text: str) -> list[str]:
    """Run ids from stdin: one a line, or JSON objects with a ``run_id`` (``--jsonl`` output).

    Blank lines are skipped; there is no comment syntax, since a run id may begin with ``#``.
    """
    ids: list[str] = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                value = json.loads(line).get("run_id")
            except (ValueError, AttributeError):
                value = None
            if not isinstance(value, str):
                raise InputError(f'stdin line {number}: a JSON line must have a "run_id".')
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


def dry_run_one(ctx: typer.Context, run_id: str, as_json: bool) -> None:
    """``--dry-run`` with one RUN: as the real command, an unknown run is exit 2."""
    state = CliState.of(ctx)
    with state.open_engine(create=False, with_runtimes=False, read_only=True) as engine:
        engine.get_run(run_id)
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


@with_filters
def cancel(
    ctx: typer.Context,
    runs: RunsArg = None,
    reason: Reason = None,
    dry_run: DryRun = False,
    yes: Yes = False,
    json_output: JsonFlag = False,
    jsonl: JsonlFlag = False,
    *,
    filters: FilterArgs,
) -> None:
    """Request cancellation of runs.

    A run moves to Cancelling; its workflow may run cleanup steps, then ends Cancelled. Asking
    twice is harmless, and a run that already ended is skipped (exit 0), as by terminate. Several
    runs (ids, - for stdin, or filters): one result line each (done, skipped or failed); exit 1
    if any failed. --dry-run names a run that does not exist (exit 2 for one RUN, else 1).
    """
    text = reason or "cancelled by operator"
    if runs and len(runs) == 1 and runs != ["-"] and not filters.selects:
        if dry_run:
            dry_run_one(ctx, runs[0], json_output)
            return
        cmd_facts.cancel(ctx, runs[0], text, json_output)
        return
    from flow_cli.ops.bulk import cancel_runs

    state = CliState.of(ctx)
    with state.open_engine(create=False, with_runtimes=False) as engine:
        act(
            state,
            engine,
            select(engine, runs or [], filters, follow=True),
            verb="cancel",
            dry_run=dry_run,
            yes=yes,
            as_json=state.want_json(json_output),
            jsonl=jsonl,
            results=lambda ids: cancel_runs(engine, ids, text),
        )


@with_filters
def terminate(
    ctx: typer.Context,
    runs: RunsArg = None,
    reason: Reason = None,
    dry_run: DryRun = False,
    yes: Yes = False,
    json_output: JsonFlag = False,
    jsonl: JsonlFlag = False,
    *,
    filters: FilterArgs,
) -> None:
    """End runs at once, without running workflow code.

    Unsettled steps get step_cancelled (outcome_unknown where an attempt started), children
    follow their cancellation policy, then run_cancelled with "forced": true. Works on a run
    whose code raises on every decision. A run that already ended is skipped. A run named
    that continued as new stands for its live successor (said on stderr).
    """
    from flow_cli.ops.bulk import terminate_runs

    text = reason or "terminated by operator"
    state = CliState.of(ctx)
    with state.open_engine(create=False, with_runtimes=False) as engine:
        targets = select(engine, runs or [], filters, follow=True)
        if len(targets.ids) == 1 and not targets.by_filter:
            engine.get_run(targets.ids[0])  # one unknown run: exit 2, as for every verb
        act(
            state,
            engine,
            targets,
            verb="terminate",
            dry_run=dry_run,
            yes=yes,
            as_json=state.want_json(json_output),
            jsonl=jsonl,
            results=lambda ids: terminate_runs(engine, ids, text),
        )


@with_filters
def signal_runs(
    ctx: typer.Context,
    run_id: Annotated[
        str,
        typer.Argument(
            metavar="RUN",
            help="The run id, or - to read run ids from stdin. With filters, leave RUN out "
            "and give only NAME.",
            autocompletion=complete_run_id,
        ),
    ],
    name: Annotated[
        str | None,
        typer.Argument(metavar="NAME", help="The signal name the workflow waits for."),
    ] = None,
    payload: Payload = None,
    dry_run: DryRun = False,
    yes: Yes = False,
    json_output: JsonFlag = False,
    jsonl: JsonlFlag = False,
    key: SignalKey = None,
    *,
    filters: FilterArgs,
) -> None:
    """Deliver signal NAME to RUN (or to many runs).

    A signal that arrives before the workflow waits for it is kept and matched later, in order.
    Signalling a run that already ended fails (exit 1). Many runs: flow signal - NAME reads run
    ids from stdin; flow signal NAME --waiting-on signal:NAME --yes signals every match. With
    --key, running the same command again delivers nothing twice.
    """
    if name is None:
        if not filters.selects:
            raise InputError("give RUN and NAME (or NAME with filters, or - NAME for stdin).")
        runs, name = [], run_id
    else:
        runs = [run_id]
    if runs and runs != ["-"] and not filters.selects:
        if dry_run:
            dry_run_one(ctx, run_id, json_output)
            return
        cmd_facts.signal_run(ctx, run_id, name, payload, json_output, key)
        return
    from flow_cli.ops.bulk import signal_runs as deliver

    value = parse_json_arg(payload, "--payload")
    signal_name = name
    state = CliState.of(ctx)
    with state.open_engine(create=False, with_runtimes=False) as engine:
        act(
            state,
            engine,
            select(engine, runs, filters, follow=True),
            verb="signal",
            dry_run=dry_run,
            yes=yes,
            as_json=state.want_json(json_output),
            jsonl=jsonl,
            results=lambda ids: deliver(engine, ids, signal_name, value, key=key),
        )


@with_filters
def export(
    ctx: typer.Context,
    runs: RunsArg = None,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            metavar="FILE|DIR",
            help="One run: write to FILE (- is stdout, the default; a FIFO, device or directory "
            "is refused). Many runs: the directory to write RUN.json files into (run ids "
            "percent-encoded: / becomes %2F; a name over 255 bytes is cut and ends in ~ and a "
            "hash of the id).",
            show_default=False,
        ),
    ] = None,
    dry_run: DryRun = False,
    yes: Yes = False,
    json_output: JsonFlag = False,
    jsonl: JsonlFlag = False,
    include_secrets: Annotated[
        bool,
        typer.Option(
            "--include-secrets",
            help="Keep the seed and hook tokens, which the export of a run that has not "
            "finished leaves out by default (they let a reader resolve its open hooks).",
        ),
    ] = False,
    every: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Every run (with -o DIR and --yes, as filters matching many runs need).",
        ),
    ] = False,
    *,
    filters: FilterArgs,
) -> None:
    """Write the history of RUN (or of many runs) as JSON, for replay elsewhere.

    The file feeds `flow replay-check --file FILE`, e.g. in CI. Many runs (ids, - for stdin,
    filters, or --all) need -o DIR; files are rewritten when exported again. For a run that has
    not finished, the seed and hook tokens are left out unless --include-secrets is given (a
    token resolves a hook); replay-check does not compare the tokens of such a file.
    """
    if runs and len(runs) == 1 and runs != ["-"] and not filters.selects and not every:
        if dry_run:
            dry_run_one(ctx, runs[0], json_output)
            return
        cmd_read.export(ctx, runs[0], output, include_secrets)
        return
    if output is None or str(output) == "-":
        raise InputError("exporting many runs needs -o DIR (one RUN.json per run).")
    directory = output.expanduser()
    if directory.exists() and not directory.is_dir():
        raise InputError(f"-o {output}: not a directory (many runs are written one file each).")
    state = CliState.of(ctx)
    with state.open_engine(create=False, with_runtimes=False, read_only=True) as engine:
        targets = select(engine, runs or [], filters, every=every)
        if targets.ids and not dry_run and (yes or not targets.by_filter or len(targets.ids) < 2):
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise InputError(f"cannot create {output}: {exc.strerror or exc}.") from None
        act(
            state,
            engine,
            targets,
            verb="export",
            dry_run=dry_run,
            yes=yes,
            as_json=state.want_json(json_output),
            jsonl=jsonl,
            results=lambda ids: _export_each(engine, ids, directory, include_secrets),
        )


def _export_each(
    engine: Engine, run_ids: list[str], directory: Path, include_secrets: bool = False
) -> Iterator[BulkResult]:
    """Write each run's file; a file this export already wrote is never overwritten (two ids
    the file system takes for one name, e.g. on a case-insensitive disk, fail the second)."""
    from flow_cli.cli.export_files import export_file_name, write_file
    from flow_cli.engine.export import export_document
    from flow_cli.errors import FlowError
    from flow_cli.ops.bulk import BulkResult, Outcome

    written: dict[tuple[int, int], str] = {}
    for run_id in run_ids:
        target = directory / export_file_name(run_id)
        try:
            same = written.get(_identity(target))
            if same is not None:
                raise InputError(f"{target} already holds the export of run {same!r}; not replaced")
            document = export_document(
                run_id, engine.history(run_id), include_secrets=include_secrets
            )
            done = write_file(target, dumps(document) + "\n")
        except FlowError as exc:
            yield BulkResult(run_id, Outcome.FAILED, str(exc))
            continue
        written[(done.st_dev, done.st_ino)] = run_id
        yield BulkResult(run_id, Outcome.DONE, f"wrote {target}")


def _identity(path: Path) -> tuple[int, int]:
    try:
        found = path.stat()
    except OSError:
        return (-1, -1)
    return (found.st_dev, found.st_ino)


def resolve_from_stdin(state: CliState, payload: Any, run_id: str | None, as_json: bool) -> None:
    """``flow hook resolve -``: resolve every token read from stdin with ``payload``."""
    from flow_cli.errors import FlowError
    from flow_cli.ops.bulk import BulkResult, Outcome

    tokens: list[str] = []
    for number, raw in enumerate(sys.stdin.read().splitlines(), 1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("{"):
            try:
                token = json.loads(line).get("token")
            except (ValueError, AttributeError):
                token = None
            if not isinstance(token, str):
                raise InputError(f'stdin line {number}: a JSON line must have a "token".')
            line = token
        tokens.append(line)

    def resolve(found: list[str]) -> Iterator[BulkResult]:
        for token in found:
            try:
                owner, hook_id = engine.resolve_hook(token, payload, run_id=run_id)
            except FlowError as exc:
                yield BulkResult(token, Outcome.FAILED, str(exc))
                continue
            yield BulkResult(owner, Outcome.DONE, f"hook {hook_id!r} resolved")

    with state.open_engine(create=False, with_runtimes=False) as engine:
        act(
            state,
            engine,
            Targets(tokens, False, {}),
            verb="resolve",
            dry_run=False,
            yes=True,
            as_json=as_json,
            jsonl=False,
            results=resolve,
        )
