"""Finding runs: ``flow runs`` with the §6.1 filters, ``flow count``, ``flow hook list``.

Read-only: the database is opened with ``create=False`` and no runtime is imported. Selection
goes through the store's indexed ``find_runs`` / ``count_runs`` / ``list_hooks``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from flow_cli.cli.filters import FilterArgs, with_filters
from flow_cli.cli.io import emit_json
from flow_cli.cli.options import JsonFlag, complete_run_id, text_argument, text_option
from flow_cli.cli.state import CliState

if TYPE_CHECKING:
    from flow_cli.store.protocol import HookListing, RunRecord

JsonlFlag = Annotated[
    bool, typer.Option("--jsonl", help="One JSON object per line (stable field names).")
]


def run_json(record: RunRecord) -> dict[str, Any]:
    """The ``flow runs --json`` object of one run."""
    return {
        "run_id": record.run_id,
        "workflow": record.workflow,
        "status": record.status.value,
        "build_id": record.build_id,
        "parent_run_id": record.parent_run_id,
        "created_at": record.created_at.isoformat(),
        "updated_at": record.updated_at.isoformat(),
        "last_sequence": record.last_sequence,
        "failing": record.failing,
        "waiting_on": record.waiting_on.split() if record.waiting_on else [],
        "error_type": record.error_type,
        "reason": record.error,
        "attributes": dict(record.attributes),
        "priority": record.priority,
    }


def emit_rows(rows: list[dict[str, Any]], jsonl: bool) -> None:
    if jsonl:
        for row in rows:
            emit_json(row, compact=True)
    else:
        emit_json(rows)


@with_filters
def runs(
    ctx: typer.Context,
    json_output: JsonFlag = False,
    jsonl: JsonlFlag = False,
    *,
    filters: FilterArgs,
) -> None:
    """List runs, newest first, optionally filtered.

    The reason column gives the error type and message of a Failed run, and of a run whose
    last decision failed (workflow code raised, or was non-deterministic), marked failing with
    ⚠: it is not terminal and resumes once fixed code is deployed. --error-type TYPE selects by
    it; `flow count --by error_type` counts by it.

    The table shows at most 50 runs unless --limit says otherwise (--limit 0: all); a line under
    it says how many matched. --json and --jsonl list every match unless --limit is given. Page
    with --limit N and --after LAST_RUN_ID.
    """
    from dataclasses import replace

    state = CliState.of(ctx)
    where = filters.to_filter()
    as_data = jsonl or state.want_json(json_output)
    cut = not as_data and filters.limit is None
    total: int | None = None
    with state.open_engine(create=False, with_runtimes=False, read_only=True) as engine:
        records = engine.find_runs(replace(where, limit=TABLE_ROWS + 1) if cut else where)
        if cut and len(records) > TABLE_ROWS:
            records = records[:TABLE_ROWS]
            # With a cursor the count would include the pages before it: not said.
            total = None if where.after is not None else engine.count_runs(where).total
    if as_data:
        emit_rows([run_json(r) for r in records], jsonl)
        return
    from flow_cli.cli import render

    more = cut and len(records) == TABLE_ROWS and (total is None or total > TABLE_ROWS)
    render.console().print(render.runs_table(records, matched=total, more=more))


TABLE_ROWS = 50
"""Rows ``flow runs`` prints without ``--limit`` (``--json``/``--jsonl`` are never cut)."""


GROUPINGS_HELP = "status|workflow|build_id|error_type|attr:KEY"


def parse_grouping(by: str | None) -> str | None:
    """``--by``: a column of the runs index, or ``attr:KEY`` (a search attribute). Raises
    ``InputError`` naming what is allowed."""
    from flow_cli.errors import InputError
    from flow_cli.model.attributes import check_key
    from flow_cli.store.protocol import ATTRIBUTE_GROUPING, GROUPINGS

    if by is None or by in GROUPINGS:
        return by
    if by.startswith(ATTRIBUTE_GROUPING):
        key = by[len(ATTRIBUTE_GROUPING) :]
        if not key:
            raise InputError("--by attr:KEY needs a KEY (the search attribute to count by).")
        check_key(key, "--by")
        return by
    raise InputError(f"--by {by!r} is not one of {GROUPINGS_HELP.replace('|', ', ')}.")


def complete_grouping(incomplete: str) -> list[str]:
    """Shell completion for ``--by``."""
    from flow_cli.store.protocol import GROUPINGS

    return [g for g in (*GROUPINGS, "attr:") if g.startswith(incomplete)]


@with_filters
def count(
    ctx: typer.Context,
    by: Annotated[
        str | None,
        text_option(
            "--by",
            GROUPINGS_HELP,
            "Count per status, workflow, build id, error type (of Failed runs and "
            "failing decisions; (none) for the rest), or search attribute KEY (attr:KEY; "
            "(none) for runs without it).",
            autocompletion=complete_grouping,
        ),
    ] = None,
    json_output: JsonFlag = False,
    *,
    filters: FilterArgs,
) -> None:
    """Count runs matching the filters (all runs without any).

    --json: {"total": n, "groups": {key: n}} (groups is empty without --by).
    """
    state = CliState.of(ctx)
    where = filters.to_filter()
    grouping = parse_grouping(by)
    with state.open_engine(create=False, with_runtimes=False, read_only=True) as engine:
        counted = engine.count_runs(where, grouping)
    if state.want_json(json_output):
        emit_json({"total": counted.total, "groups": dict(counted.groups)})
        return
    from flow_cli.cli import render_triage

    render_triage.console().print(render_triage.count_table(counted, grouping))


def hook_json(hook: HookListing) -> dict[str, Any]:
    """The ``flow hook list --json`` object of one hook."""
    return {
        "run_id": hook.run_id,
        "hook_id": hook.hook_id,
        "token": hook.token,
        "state": "resolved" if hook.resolved else "open",
        "created_at": None if hook.created_at is None else hook.created_at.isoformat(),
        "metadata": hook.metadata,
    }


def hook_list(
    ctx: typer.Context,
    run_id: Annotated[
        str | None,
        text_argument("[RUN]", "Only the hooks of this run.", autocompletion=complete_run_id),
    ] = None,
    open_only: Annotated[
        bool, typer.Option("--open", help="Only hooks still waiting for their callback.")
    ] = False,
    json_output: JsonFlag = False,
    jsonl: JsonlFlag = False,
) -> None:
    """List hooks with their tokens, oldest first.

    Columns: run, hook id, token, state (open or resolved), age, metadata. Resolve many at
    once from a pipeline: flow hook list --open --jsonl | jq -r .token | flow hook resolve -
    """
    state = CliState.of(ctx)
    with state.open_engine(create=False, with_runtimes=False, read_only=True) as engine:
        hooks = engine.list_hooks(run_id, open_only)
    if jsonl or state.want_json(json_output):
        emit_rows([hook_json(h) for h in hooks], jsonl)
        return
    from flow_cli.cli import render_triage

    render_triage.console().print(render_triage.hooks_table(hooks, datetime.now(UTC)))
