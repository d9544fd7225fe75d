"""Fleet health: ``workers``, ``doctor``, ``builds`` and ``upgrade``.

``workers``, ``doctor`` and ``builds`` only read the database (``create=False``) and never import
the runtimes; ``upgrade`` needs the runtime of the target build to replay runs against it.
"""

from __future__ import annotations

from typing import Any

import typer

from flow_cli.cli.io import emit_json
from flow_cli.cli.options import JsonFlag
from flow_cli.cli.state import CliState


def workers(ctx: typer.Context, json_output: JsonFlag = False) -> None:
    """List the workers registered in the database, live or gone.

    `flow worker` and `flow tick` register themselves and heartbeat every few seconds
    (FLOW_HEARTBEAT_SECONDS, default 5). A worker is live while its last heartbeat is at most
    three of its intervals old; one that stopped cleanly or stopped heartbeating (killed,
    machine lost) is gone. Gone workers are forgotten after a day.
    """
    state = CliState.of(ctx)
    with state.open_engine(create=False, with_runtimes=False) as engine:
        found = engine.store.list_workers()
        now = engine.clock.now()
    rows: list[dict[str, Any]] = [
        {
            "worker_id": w.worker_id,
            "host": w.host,
            "pid": w.pid,
            "builds": list(w.builds),
            "started_at": w.started_at.isoformat(),
            "heartbeat_at": w.heartbeat_at.isoformat(),
            "live": w.live(now),
            "stopped_at": None if w.stopped_at is None else w.stopped_at.isoformat(),
            "heartbeat_seconds": w.heartbeat_seconds,
        }
        for w in found
    ]
    rows.sort(key=lambda row: not row["live"])  # live first; each group newest first
    if state.want_json(json_output):
        emit_json(rows)
        return
    from flow_cli.cli import render
    from flow_cli.cli.render_fleet import workers_table

    render.console().print(workers_table(rows))
