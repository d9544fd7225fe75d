"""Bulk cancellation by filter: 1,000 waiting runs cancelled by one `flow cancel` process.

    .venv/bin/python bench/bulk_cancel.py [--runs 1000] [--backends sqlite,postgres]

Each backend gets a fresh database with N runs waiting on a signal (decided in-process first,
not timed). The figure is the wall time of one real `flow cancel --waiting-on signal:go --yes`
process, start-up included, until every run has its `cancel_requested`. Target on SQLite:
1,000 runs in at most 5 s.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

from common import DEFAULT_PG, ROOT, fresh_database

from flow_cli import Runtime, WorkflowContext
from flow_cli.model.commands import RuntimeCommand

runtime = Runtime(build_id="bench-bulk")


@runtime.workflow("waits")
def waits(ctx: WorkflowContext) -> RuntimeCommand:
    return ctx.complete(ctx.receive("go", "go"))


def measure(backend: str, runs: int, pg_url: str) -> tuple[float, int]:
    from flow_cli.engine.engine import Engine
    from flow_cli.store import open_store
    from flow_cli.store.protocol import RunFilter

    with fresh_database(backend, pg_url) as (url, scratch):
        engine = Engine(open_store(url), [runtime])
        for index in range(runs):
            engine.start("waits", None, run_id=f"bulk-{index:05d}")
        engine.tick(until_idle=True)
        env = dict(os.environ, PYTHONPATH=str(ROOT), FLOW_DB=url, NO_COLOR="1")
        env.pop("FLOW_CONFIG", None)
        started = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-m", "flow_cli", "cancel", "--waiting-on", "signal:go", "--yes"],
            env=env,
            cwd=scratch,
            capture_output=True,
            text=True,
            check=False,
        )
        elapsed = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"flow cancel failed: {done.stderr}")
        cancelling = engine.store.count_runs(
            RunFilter(statuses=(engine.get_run("bulk-00000").status,))
        )
        engine.close()
        return elapsed, cancelling.total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--backends", default="sqlite")
    parser.add_argument("--pg-url", default=DEFAULT_PG)
    args = parser.parse_args()
    for backend in args.backends.split(","):
        elapsed, cancelling = measure(backend, args.runs, args.pg_url)
        print(
            f"{backend:8} {args.runs} runs cancelled by filter in {elapsed:.2f} s "
            f"({args.runs / elapsed:.0f} runs/s, one process); {cancelling} now Cancelling"
        )


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
