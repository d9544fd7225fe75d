"""How fast timers that come due at the same instant fire and move on (issue 7, W4).

    .venv/bin/python bench/timer_drain.py [--runs 10000] [--backend sqlite|postgres]

N runs sleep until one absolute instant (then run one step and complete); one real
`flow worker` process serves them. Prints the worker's threads while they sleep and the runs
drained per second from the instant they came due until the last one completed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from common import DEFAULT_PG, bench_worker, fresh_database, stop  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "postgres"])
    args = parser.parse_args()

    import bench_workflows

    from flow_cli.engine.engine import Engine
    from flow_cli.model.status import RunStatus
    from flow_cli.store import open_store

    with fresh_database(args.backend, DEFAULT_PG) as (url, scratch):
        worker = bench_worker(url, scratch)
        setup_url = url + ("?synchronous=NORMAL" if args.backend == "sqlite" else "")
        engine = Engine(open_store(setup_url), [bench_workflows.runtime])
        try:
            # Far enough ahead for every run to be started and asleep first.
            at = datetime.now(UTC) + timedelta(seconds=10 + args.runs / 400)
            for i in range(args.runs):
                engine.start("alarm", {"at": at.isoformat()}, run_id=f"alarm-{i}")
            while len(engine.list_runs(status=RunStatus.SUSPENDED)) < args.runs:
                time.sleep(0.5)
            threads = len(os.listdir(f"/proc/{worker.pid}/task"))
            time.sleep(max(0.0, (at - datetime.now(UTC)).total_seconds()))
            started = time.perf_counter()
            while engine.get_run(f"alarm-{args.runs - 1}").status is not RunStatus.COMPLETED or (
                len(engine.list_runs(status=RunStatus.COMPLETED)) < args.runs
            ):
                time.sleep(0.1)
            seconds = time.perf_counter() - started
        finally:
            stop([worker])
            engine.close()
    print("backend   runs  worker threads asleep  drain seconds  runs/s")
    print(
        f"{args.backend:8} {args.runs:6}  {threads:21}  {seconds:13.2f}  {args.runs / seconds:6.0f}"
    )


if __name__ == "__main__":
    main()
