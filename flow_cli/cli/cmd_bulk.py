"""The verbs that act on one run or many: ``cancel``, ``terminate``, ``signal``, ``export``
(the machinery they share is in ``bulk``).

Targets are run ids on the command line, ``-`` (ids from stdin, one a line; JSON lines from
``flow runs --jsonl`` work too), or the filters of ``flow runs``. ``--dry-run`` lists the targets
and changes nothing; acting on more than one run matched by filters needs ``--yes``. Each run
gets one result line (``--json``: an array, ``--jsonl``: one object a line); a progress bar runs
on stderr when it is a terminal; the exit code is 1 if any run failed.

With exactly one run id and no filters, ``cancel``, ``signal`` and ``export`` behave as they
always did (their single-run output and exit codes are unchanged).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from flow_cli.cli.bulk import (
    DryRun,
    Reason,
    RunsArg,
    Targets,
    Yes,
    act,
    dry_run_one,
    open_live,
    select,
)
from flow_cli.cli.bundles import bundled
from flow_cli.cli.cmd_triage import JsonlFlag
from flow_cli.cli.filters import FilterArgs, with_filters
from flow_cli.cli.io import dumps, emit_json, note, out, parse_json_arg
from flow_cli.cli.options import JsonFlag, Payload, RunArg, SignalKey, complete_run_id, text_option
from flow_cli.cli.state import CliState
from flow_cli.cli.words import plural
from flow_cli.errors import InputError, RunFinished
from flow_cli.model.names import check_name, escape_controls

if TYPE_CHECKING:
    from flow_cli.engine.engine import Engine
    from flow_cli.ops.bulk import BulkResult


@dataclass(frozen=True, slots=True)
class BulkFlags:
    """``--dry-run``, ``--yes``, ``--json`` and ``--jsonl``: the options of every verb here."""

    dry_run: bool
    yes: bool
    json_output: bool
    jsonl: bool

    def act_on(
        self,
        state: CliState,
        engine: Engine,
        targets: Targets,
        verb: str,
        results: Callable[[Iterable[str]], Iterator[BulkResult]],
    ) -> None:
        """``act`` on ``targets`` as these options ask."""
        act(
            state,
            engine,
            targets,
            verb=verb,
            dry_run=self.dry_run,
            yes=self.yes,
            as_json=state.want_json(self.json_output),
            jsonl=self.jsonl,
            results=results,
        )


# Where a command declares ``flags: BulkFlags``, these four options stand in its signature.
with_bulk_flags = bundled(
    "flags",
    {
        "dry_run": (DryRun, False),
        "yes": (Yes, False),
        "json_output": (JsonFlag, False),
        "jsonl": (JsonlFlag, False),
    },
    BulkFlags,
)


def _ending_verb(
    verb: str,
    default_reason: str,
    results: Callable[[Engine, Iterable[str], str], Iterator[BulkResult]],
    one: Callable[[typer.Context, str, str, bool, bool], None] | None,
) -> Callable[..., None]:
    """The command of a verb that ends runs (``cancel``, ``terminate``): one signature for
    both. ``one`` handles a single run named without filters; without it, one unknown run is
    exit 2 as for every verb."""

    @with_filters
    @with_bulk_flags
    def command(
        ctx: typer.Context,
        runs: RunsArg = None,
        reason: Reason = None,
        *,
        flags: BulkFlags,
        filters: FilterArgs,
    ) -> None:
        text = reason or default_reason
        alone = bool(runs) and len(runs or []) == 1 and runs != ["-"] and not filters.selects
        if alone and one is not None:
            one(ctx, (runs or [""])[0], text, flags.dry_run, flags.json_output)
            return
        state = CliState.of(ctx)
        with state.open_engine(create=False, with_runtimes=False) as engine:
            targets = select(engine, runs or [], filters, follow=True)
            if one is None and len(targets.named()) == 1:
                engine.get_run(targets.named()[0])  # one unknown run: exit 2, as for every verb
            flags.act_on(state, engine, targets, verb, lambda ids: results(engine, ids, text))

    command.__name__ = command.__qualname__ = verb
    return command


def _cancel_alone(
    ctx: typer.Context, run_id: str, reason: str, dry_run: bool, json_output: bool
) -> None:
    # One run: the single-run output and exit codes of `flow cancel RUN`.
    if dry_run:
        dry_run_one(ctx, run_id, json_output)
    else:
        cancel_one(ctx, run_id, reason, json_output)


def _cancel_runs(engine: Engine, ids: Iterable[str], reason: str) -> Iterator[BulkResult]:
    from flow_cli.ops.bulk import cancel_runs

    return cancel_runs(engine, ids, reason)


def _terminate_runs(engine: Engine, ids: Iterable[str], reason: str) -> Iterator[BulkResult]:
    from flow_cli.ops.bulk import terminate_runs

    return terminate_runs(engine, ids, reason)


cancel = _ending_verb("cancel", "cancelled by operator", _cancel_runs, _cancel_alone)
cancel.__doc__ = """Request cancellation of runs.

    A run moves to Cancelling; its workflow may run cleanup steps, then ends Cancelled. Asking
    twice is harmless, and a run that already ended is skipped (exit 0), as by terminate. Several
    runs (ids, - for stdin, or filters): one result line each (done, skipped or failed); exit 1
    if any failed. --dry-run names a run that does not exist (exit 2 for one RUN, else 1).
    """


def _retry_runs(engine: Engine, ids: Iterable[str], reason: str) -> Iterator[BulkResult]:
    from flow_cli.ops.bulk import retry_runs

    return retry_runs(engine, ids, reason)


retry = _ending_verb("retry", "retried by operator", _retry_runs, None)
retry.__doc__ = """Try runs now instead of waiting out a back-off (after a hotfix, say).

    A run whose last decision failed is decided now; a step waiting for its next attempt
    starts it now (retry_requested is recorded). A run with neither, or one that ended, is
    skipped. Several runs (ids, - for stdin, or filters): one result line each; --json gives
    one object per run. --reason is recorded with retry_requested.
    """

terminate = _ending_verb("terminate", "terminated by operator", _terminate_runs, None)
terminate.__doc__ = """End runs at once, without running workflow code.

    Unsettled steps get step_cancelled (outcome_unknown where an attempt started), children
    follow their cancellation policy, then run_cancelled with "forced": true. Works on a run
    whose code raises on every decision. A run that already ended is skipped. A run named
    that continued as new stands for its live successor (said on stderr).
    """


@with_filters
@with_bulk_flags
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
    *,
    flags: BulkFlags,
    key: SignalKey = None,
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
        if flags.dry_run:
            dry_run_one(ctx, run_id, flags.json_output)
            return
        signal_run(ctx, run_id, name, payload, flags.json_output, key)
        return
    from flow_cli.ops.bulk import signal_runs as deliver

    value = parse_json_arg(payload, "--payload")
    signal_name = name
    state = CliState.of(ctx)
    with state.open_engine(create=False, with_runtimes=False) as engine:
        flags.act_on(
            state,
            engine,
            select(engine, runs, filters, follow=True),
            "signal",
            lambda ids: deliver(engine, ids, signal_name, value, key=key),
        )


@with_filters
@with_bulk_flags
def export(
    ctx: typer.Context,
    runs: RunsArg = None,
    output: Annotated[
        Path | None,
        text_option(
            "--output",
            "FILE|DIR",
            "One run: write to FILE (- is stdout, the default; a FIFO, device or directory "
            "is refused). Many runs: the directory to write RUN.json files into (run ids "
            "percent-encoded: / becomes %2F; a name over 255 bytes is cut and ends in ~ and a "
            "hash of the id).",
            short="-o",
        ),
    ] = None,
    *,
    flags: BulkFlags,
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
    filters: FilterArgs,
) -> None:
    """Write the history of RUN (or of many runs) as JSON, for replay elsewhere.

    The file feeds `flow replay-check --file FILE`, e.g. in CI. Many runs (ids, - for stdin,
    filters, or --all) need -o DIR; files are rewritten when exported again. For a run that has
    not finished, the seed and hook tokens are left out unless --include-secrets is given (a
    token resolves a hook); replay-check does not compare the tokens of such a file.
    """
    if runs and len(runs) == 1 and runs != ["-"] and not filters.selects and not every:
        if flags.dry_run:
            dry_run_one(
                ctx, runs[0], flags.json_output, follow=False
            )  # an export reads the run named
            return
        export_one(ctx, runs[0], output, include_secrets)
        return
    if output is None or str(output) == "-":
        raise InputError("exporting many runs needs -o DIR (one RUN.json per run).")
    directory = output.expanduser()
    if directory.exists() and not directory.is_dir():
        raise InputError(f"-o {output}: not a directory (many runs are written one file each).")
    state = CliState.of(ctx)
    with state.open_engine(create=False, with_runtimes=False, read_only=True) as engine:
        targets = select(engine, runs or [], filters, every=every)
        first = targets.first(2)
        if first and not flags.dry_run and (flags.yes or not targets.by_filter or len(first) < 2):
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise InputError(f"cannot create {output}: {exc.strerror or exc}.") from None
        flags.act_on(
            state,
            engine,
            targets,
            "export",
            lambda ids: _export_each(
                engine,
                ids,
                directory,
                include_secrets,
                # Runs named are few (they are a list already); a walk of the runs filters
                # select remembers its files only where two names can be one file.
                remember=not targets.by_filter or _names_may_meet(directory),
            ),
        )


def _export_each(
    engine: Engine,
    run_ids: Iterable[str],
    directory: Path,
    include_secrets: bool = False,
    *,
    remember: bool = True,
) -> Iterator[BulkResult]:
    """Write each run's file; a file this export already wrote is never overwritten (two ids
    the file system takes for one name, e.g. on a case-insensitive disk, fail the second).

    What it wrote is remembered (``remember``) as one integer a file (device and inode), not a
    run id; the run a file holds is read back from it only when a second id lands on the same
    file. Without ``remember`` (a directory where distinct names are distinct files, as
    ``export_file_name`` gives distinct ids), nothing is kept per run: an export of a million
    runs holds one at a time."""
    from flow_cli.cli.export_files import export_file_name, write_file
    from flow_cli.engine.export import export_document
    from flow_cli.errors import FlowError
    from flow_cli.ops.bulk import BulkResult, Outcome

    written: set[int] = set()
    for run_id in run_ids:
        target = directory / export_file_name(run_id)
        try:
            if _identity(target) in written:
                same = _exported_run(target)
                raise InputError(f"{target} already holds the export of run {same!r}; not replaced")
            document = export_document(
                run_id, engine.history(run_id), include_secrets=include_secrets
            )
            done = write_file(target, dumps(document) + "\n")
        except FlowError as exc:
            yield BulkResult(run_id, Outcome.FAILED, str(exc))
            continue
        if remember:
            written.add(_file_key(done.st_dev, done.st_ino))
        yield BulkResult(run_id, Outcome.DONE, f"wrote {target}")


def _names_may_meet(directory: Path) -> bool:
    """Whether ``directory``'s file system may take two different names for one file: it
    ignores case or Unicode normalization (a probe file is made and looked for under the other
    spelling). ``True`` when the probe cannot tell."""
    import secrets
    import unicodedata

    stem = f".flow-probe-{secrets.token_hex(6)}-"
    spelled = stem + "A\u00e9"  # capital A, é composed
    probe = directory / spelled
    try:
        probe.touch(exist_ok=False)
    except OSError:
        return True
    try:
        others = (stem + "a\u00e9", unicodedata.normalize("NFD", spelled))
        return any((directory / other).exists() for other in others)
    except OSError:
        return True
    finally:
        probe.unlink(missing_ok=True)


def _file_key(device: int, inode: int) -> int:
    return device << 64 | inode


def _exported_run(path: Path) -> str | None:
    """The run id of an export file this export wrote."""
    import json

    try:
        found = json.loads(path.read_text(encoding="utf-8")).get("run_id")
    except (OSError, ValueError, AttributeError):
        return None
    return found if isinstance(found, str) else None


def _identity(path: Path) -> int:
    try:
        found = path.stat()
    except OSError:
        return -1
    return _file_key(found.st_dev, found.st_ino)


def signal_run(
    ctx: typer.Context,
    run_id: RunArg,
    name: Annotated[
        str, typer.Argument(metavar="NAME", help="The signal name the workflow waits for.")
    ],
    payload: Payload = None,
    json_output: JsonFlag = False,
    key: SignalKey = None,
) -> None:
    """Deliver signal NAME to RUN.

    A signal that arrives before the workflow waits for it is kept and matched later, in order.
    A run that continued as new passes the signal on to its live successor (said on stderr).
    Signalling a run that already ended fails (exit 1). A workflow that declares its signals
    refuses another name (exit 2, listing them; nothing written). With --key, sending again
    with the same key delivers nothing new and says "duplicate" (exit 0); the same key with
    another payload is refused (exit 1).
    """
    state = CliState.of(ctx)
    check_name(name, "signal name")
    value = parse_json_arg(payload, "--payload")
    with open_live(state, run_id) as (engine, run_id):
        sent = engine.deliver_signal(run_id, name, value, key=key)
    if state.want_json(json_output):
        emit_json(
            {
                "run_id": run_id,
                "signal": name,
                "sequence": sent.sequence,
                "duplicate": sent.duplicate,
            }
        )
    elif sent.duplicate:
        out(
            f"signal {name!r} with key {key!r} was already delivered to run "
            f"{escape_controls(run_id)} (event {sent.sequence}): duplicate, nothing sent"
        )
    else:
        out(f"signal {name!r} delivered to run {escape_controls(run_id)} (event {sent.sequence})")


def cancel_one(
    ctx: typer.Context,
    run_id: RunArg,
    reason: Annotated[
        str, typer.Option("--reason", metavar="TEXT", help="Why; recorded in the history.")
    ] = "cancelled by operator",
    json_output: JsonFlag = False,
) -> None:
    """Request cancellation of RUN.

    The run moves to Cancelling; its workflow may run cleanup steps, then ends Cancelled.
    Asking twice is harmless. A run that continued as new has its live successor cancelled
    (said on stderr). A run that already ended is skipped (exit 0), as by `flow terminate`.
    """
    state = CliState.of(ctx)
    with open_live(state, run_id) as (engine, run_id):
        try:
            requested = engine.cancel(run_id, reason)
        except RunFinished as exc:
            # What cancelling asks for, an end, is already there: skipped, exit 0, the rule
            # of `flow terminate` and of both verbs on many runs.
            if state.want_json(json_output):
                emit_json(
                    {"run_id": run_id, "requested": False, "skipped": f"already {exc.status}"}
                )
            else:
                out(f"cancellation of run {run_id} skipped: already {exc.status}")
            return
    if state.want_json(json_output):
        emit_json({"run_id": run_id, "requested": requested})
    elif requested:
        out(f"cancellation of run {escape_controls(run_id)} requested")
    else:
        out(f"cancellation of run {escape_controls(run_id)} was already requested")


def export_one(
    ctx: typer.Context,
    run_id: RunArg,
    output: Annotated[
        Path | None,
        text_option(
            "--output",
            "FILE",
            "Write to FILE instead of stdout (- is stdout).",
            short="-o",
            dir_okay=False,
        ),
    ] = None,
    include_secrets: Annotated[
        bool,
        typer.Option(
            "--include-secrets",
            help="Keep the run's seed and hook tokens, which an unfinished run's export leaves "
            "out by default (they let a reader resolve its open hooks).",
        ),
    ] = False,
) -> None:
    """Write the history of RUN as JSON.

    The document is for replay elsewhere.

    The file feeds `flow replay-check --file FILE --build-id B`, e.g. in CI. For a run that has
    not finished, the seed and hook tokens are left out unless --include-secrets is given: a
    token resolves a hook. replay-check does not compare the tokens of such a file.
    """
    from flow_cli.cli.export_files import check_target, write_file
    from flow_cli.engine.export import export_document

    to_stdout = output is None or str(output) == "-"  # "-" is stdout, as "--input -" is stdin
    if output is not None and not to_stdout:
        check_target(output.expanduser(), str(output))  # before the database is read
    state = CliState.of(ctx)
    with state.open_engine(create=False, with_runtimes=False, read_only=True) as engine:
        document = export_document(run_id, engine.history(run_id), include_secrets=include_secrets)
    text = dumps(document) + "\n"
    if output is None or to_stdout:
        sys.stdout.write(text)
        return
    write_file(output, text)
    note(f"wrote {plural(len(document['events']), 'event')} of run {run_id} to {output}")
