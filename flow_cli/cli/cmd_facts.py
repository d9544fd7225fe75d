"""Commands that add facts to runs: ``start`` (one run, or many from ``--from-jsonl``) and
``hook resolve`` (one token, or many from stdin); ``signal`` and ``cancel`` are in ``cmd_bulk``.

Every argument is parsed and checked before the database is opened, so a bad command line never
creates or changes a database. Only ``start`` may create a missing SQLite file.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer

from flow_cli.cli.bulk import act_on_all, follow_one, read_ids
from flow_cli.cli.io import emit_json, out, parse_json_arg
from flow_cli.cli.options import JsonFlag, Payload, RunInput, text_argument, text_option
from flow_cli.cli.state import CliState
from flow_cli.errors import InputError
from flow_cli.model.names import check_name, check_run_id, escape_controls

if TYPE_CHECKING:
    pass

hook_app = typer.Typer(
    name="hook",
    help="Work with hooks: callbacks that a run waits for by token.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


def start(
    ctx: typer.Context,
    workflow: Annotated[
        str | None,
        text_argument("WORKFLOW", "The workflow name, as registered with @runtime.workflow."),
    ] = None,
    run_id: Annotated[
        str | None,
        text_option(
            "--id",
            "ID",
            "Run id to use (default: WORKFLOW-<random>). Starting the same id with the "
            "same workflow and input again is a no-op.",
        ),
    ] = None,
    input: RunInput = None,
    build_id: Annotated[
        str | None,
        text_option(
            "--build-id",
            "B",
            "Start under this loaded build. Default: flow.toml's build_id, else the one "
            "runtime that defines WORKFLOW (several and no build_id: exit 2, pass this).",
        ),
    ] = None,
    from_jsonl: Annotated[
        str | None,
        text_option(
            "--from-jsonl",
            "FILE|-",
            'Start many runs, one {"run_id", "workflow", "input", "build_id"?, "attributes"?} '
            "a line (- reads stdin); one result line per run; idempotent.",
        ),
    ] = None,
    json_output: JsonFlag = False,
    jsonl: Annotated[
        bool, typer.Option("--jsonl", help="With --from-jsonl: one JSON result a line.")
    ] = False,
    signal: Annotated[
        str | None,
        text_option(
            "--signal",
            "NAME",
            "Signal-with-start: deliver signal NAME in the transaction that creates the "
            "run (or to the run with this --id and input that exists already).",
        ),
    ] = None,
    signal_payload: Annotated[
        str | None,
        text_option(
            "--signal-payload",
            "JSON|@FILE|-",
            "With --signal: its payload (literal JSON, @file.json, or -). Default: null.",
        ),
    ] = None,
    signal_key: Annotated[
        str | None,
        text_option(
            "--signal-key", "KEY", "With --signal: its idempotency key, as flow signal --key."
        ),
    ] = None,
    traceparent: Annotated[
        str | None,
        text_option(
            "--traceparent",
            "TRACEPARENT",
            "The W3C trace context the run's spans join (default: $TRACEPARENT), "
            "recorded in the run and handed to its children and steps.",
            envvar="TRACEPARENT",
        ),
    ] = None,
    attr: Annotated[
        list[str] | None,
        text_option(
            "--attr",
            "KEY=VALUE",
            "Set search attribute KEY (repeatable; over the workflow's attributes=). "
            "VALUE is JSON when it reads as a string, number or boolean (n=5, ok=true), else "
            "text as written (customer=acme). Find runs by it: flow runs --attr KEY=VALUE.",
        ),
    ] = None,
    priority: Annotated[
        int | None,
        text_option(
            "--priority",
            "1..9",
            "Workers take due runs and ready steps by priority (1 first), then age; "
            "recorded in the run, inherited by its children. Default: 5.",
        ),
    ] = None,
) -> None:
    """Create a run of WORKFLOW and print its run id.

    Starting again with the same --id, workflow and input prints the same id (created: false);
    the same id with a different workflow or input is an error (exit 2). The run is decided by
    the next `flow tick` or a running `flow worker`. With --signal, the signal is delivered in
    the same transaction (--json adds "signal": {"sequence", "duplicate"}). --attr k=v sets
    search attributes that flow runs/count and the bulk verbs filter on (--attr k=v).
    """
    state = CliState.of(ctx)
    if signal is None and (signal_payload is not None or signal_key is not None):
        raise InputError("--signal-payload and --signal-key go with --signal NAME.")
    from flow_cli.model.attributes import parse_attributes

    attributes = parse_attributes(attr)  # checked before anything is opened
    if from_jsonl is not None:
        if signal is not None:
            raise InputError("--signal starts one run; drop it or --from-jsonl.")
        if attributes:
            raise InputError("--attr sets one run's attributes; drop it or --from-jsonl.")
        if priority is not None:
            raise InputError("--priority starts one run; drop it or --from-jsonl.")
        if workflow is not None or run_id is not None or input is not None:
            raise InputError("--from-jsonl takes workflow, id and input from its lines; drop them.")
        from flow_cli.cli.jsonl_starts import start_from_jsonl

        start_from_jsonl(ctx, from_jsonl, state.want_json(json_output), jsonl)
        return
    if workflow is None:
        raise InputError("Missing argument 'WORKFLOW' (or use --from-jsonl FILE).")
    if run_id == "":
        raise InputError("--id is empty; give the run id, or leave --id out for a generated one.")
    check_name(workflow, "workflow name")
    if run_id is not None:
        check_run_id(run_id)
    from flow_cli.model.spec import check_priority

    check_priority(priority, "--priority")  # before anything is opened
    value = parse_json_arg(input, "--input")
    sent = None
    if signal is not None:
        check_name(signal, "signal name")
        if signal_key is not None:
            check_name(signal_key, "signal key")
        if input == "-" and signal_payload == "-":
            raise InputError("--input and --signal-payload cannot both read stdin.")
        sent = (signal, parse_json_arg(signal_payload, "--signal-payload"))
    if traceparent is not None:
        from flow_cli.model.trace import TraceParent

        traceparent = str(TraceParent.parse(traceparent))  # checked before anything is opened
    state.check_startable(workflow, build_id)
    from flow_cli.cli.otel import tracing_observer

    tracer = tracing_observer()
    with state.open_engine(create=True, with_runtimes=True) as engine:
        if tracer is not None:
            engine.observe(tracer)
        result = engine.start(
            workflow,
            value,
            run_id=run_id,
            build_id=build_id,
            signal=sent,
            signal_key=signal_key,
            traceparent=traceparent,
            attributes=attributes or None,
            priority=priority,
        )
    if tracer is not None:
        tracer.shutdown()
    if state.want_json(json_output):
        shown: dict[str, Any] = {"run_id": result.run_id, "created": result.created}
        if result.signal is not None:
            shown["signal"] = {
                "sequence": result.signal.sequence,
                "duplicate": result.signal.duplicate,
            }
        emit_json(shown)
    else:
        out(escape_controls(result.run_id))


@hook_app.command("resolve")
def hook_resolve(
    ctx: typer.Context,
    token: Annotated[
        str,
        typer.Argument(metavar="TOKEN", help="The hook's token (see the hooks of `flow show`)."),
    ],
    payload: Payload = None,
    run_id: Annotated[
        str | None, text_option("--run", "RUN", "Only resolve the hook if it belongs to this run.")
    ] = None,
    json_output: JsonFlag = False,
) -> None:
    """Deliver the callback of the hook with TOKEN.

    A hook takes exactly one callback: an unknown token is exit 2, a token that was already
    resolved (or whose run ended) is exit 1. --run naming a run that continued as new means its
    live successor (said on stderr). TOKEN - reads tokens from stdin (one a line, or
    the JSON lines of `flow hook list --jsonl`) and resolves each with the same payload: one
    result line per token, exit 1 if any failed.
    """
    state = CliState.of(ctx)
    value = parse_json_arg(payload, "--payload")
    if token == "-":
        resolve_from_stdin(state, value, run_id, state.want_json(json_output))
        return
    with state.open_engine(create=False, with_runtimes=False) as engine:
        if run_id is not None:
            run_id = follow_one(engine, run_id)
        owner, hook_id = engine.resolve_hook(token, value, run_id=run_id)
    if state.want_json(json_output):
        emit_json({"run_id": owner, "hook_id": hook_id, "token": token})
    else:
        out(f"hook {hook_id!r} of run {escape_controls(owner)} resolved")


def resolve_from_stdin(state: CliState, payload: Any, run_id: str | None, as_json: bool) -> None:
    """``flow hook resolve -``: resolve every token read from stdin with ``payload``."""
    from flow_cli.errors import FlowError
    from flow_cli.ops.bulk import BulkResult, Outcome

    tokens = read_ids(sys.stdin.read(), key="token")

    def resolve(found: list[str]) -> Iterator[BulkResult]:
        for token in found:
            try:
                owner, hook_id = engine.resolve_hook(token, payload, run_id=run_id)
            except FlowError as exc:
                yield BulkResult(token, Outcome.FAILED, str(exc))
                continue
            yield BulkResult(owner, Outcome.DONE, f"hook {hook_id!r} resolved")

    with state.open_engine(create=False, with_runtimes=False) as engine:
        act_on_all(
            state, engine, tokens, verb="resolve", as_json=as_json, jsonl=False, results=resolve
        )
