"""``flow check``: is the database intact?

Runs the store's ``check_integrity()`` (SQLite's ``PRAGMA integrity_check`` and Flow's
structural checks) over a read-only connection, prints each problem on stdout and says what to
do. Exit 0 when intact, 1 when a problem was found or the database cannot even be opened.
A database that cannot be reached (server down, login refused, file missing or locked) is
reported as such, without the restore advice meant for damage.
"""

from __future__ import annotations

import typer

from flow_cli.cli import exits
from flow_cli.cli.io import emit_json, note, one_line, out
from flow_cli.cli.options import JsonFlag
from flow_cli.cli.state import CliState
from flow_cli.errors import DatabaseMissing, StoreError, StoreUnreachable

ADVICE_SQLITE = (
    "Stop workers using it, keep a copy of the damaged file (with its -wal file), then restore "
    "the last backup, or salvage what is readable: "
    'sqlite3 DAMAGED.db ".recover" | sqlite3 recovered.db, then run `flow check` on '
    "recovered.db before pointing --db at it."
)
ADVICE_POSTGRES = (
    "Stop workers using it and restore the schema from a backup (pg_dump/pg_restore or "
    "point-in-time recovery); keep the damaged schema for inspection."
)


def check(ctx: typer.Context, json_output: JsonFlag = False) -> None:
    """Check that the database is intact (exit 1 when it is not).

    SQLite: PRAGMA integrity_check, then Flow's own checks: every run's history is numbered
    1, 2, 3, ... without gaps and starts with run_started, the runs index agrees with the last
    event, and no event, step task or hook lacks its run. PostgreSQL: Flow's own checks.
    Reads only; it works on a read-only file. A database that cannot be reached (server
    down, login refused, file missing or locked) is reported as such, exit 1, and never
    created.
    """
    from flow_cli.store.locations import Backend, classify, redact

    state = CliState.of(ctx)
    url = state.database
    backend = classify(url).backend
    advice = ADVICE_POSTGRES if backend is Backend.POSTGRES else ADVICE_SQLITE
    where = redact(url)
    try:
        with state.open_engine(create=False, with_runtimes=False, read_only=True) as engine:
            problems = engine.check_integrity()
    except DatabaseMissing as exc:
        # Never created by a check: a typo in --db must not leave an empty database behind.
        place = "" if backend is Backend.SQLITE else f"{where}: "
        note(
            f"error: {place}{exc.where} does not exist; nothing was checked. Pass --db to "
            "point at an existing database."
        )
        raise typer.Exit(exits.FAILED) from None
    except StoreUnreachable as exc:
        # An outage or a refused login says nothing about the data: no restore advice, which
        # followed during an outage would put an old backup over live data.
        note(f"error: {where} could not be reached or opened, so it was not checked: {exc}")
        raise typer.Exit(exits.FAILED) from None
    except StoreError as exc:
        problems = [f"the database cannot be opened: {exc}"]
    if state.want_json(json_output):
        emit_json({"database": where, "ok": not problems, "problems": problems})
    else:
        for problem in problems:
            out(one_line(problem))
    if not problems:
        if not state.want_json(json_output):
            out(f"{where}: intact")
        return
    noun = "problem" if len(problems) == 1 else "problems"
    note(f"error: {where} failed the integrity check ({len(problems)} {noun}). {advice}")
    raise typer.Exit(exits.FAILED)
