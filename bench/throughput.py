"""Throughput of real `flow worker` processes: runs/s and steps/s on SQLite and PostgreSQL.

    .venv/bin/python bench/throughput.py [--runs 300] [--workers 1,2,4] [--backends sqlite,postgres]

Each configuration gets a fresh database, N runs of the five-step workflow
(tests/load_workflows.py), and W worker processes (2 threads each); the clock runs from the
moment the workers are spawned (their start-up included) until every run has completed.
Figures are printed with the ratio to the 1-worker run of the same backend, measured in the
same invocation, since absolute numbers on a shared machine are noisy.
"""

from __future__ import annotations

import argparse
import time

from common import DEFAULT_PG, fresh_database, spawn_worker, stop


def measure(backend: str, workers: int, runs: int, pg_url: str) -> float:
    import load_workflows

    from flow_cli.engine.engine import Engine
    from flow_cli.store import open_store

    with fresh_database(backend, pg_url) as (url, scratch):
        engine = Engine(open_store(url), [load_workflows.runtime])
        for index in range(runs):
            engine.start("five-steps", {"effects": False}, run_id=f"bench-{index:05d}")
        started = time.perf_counter()
        procs = [spawn_worker(url, scratch) for _ in range(workers)]
        try:
            while True:
                pending = sum(not r.status.terminal for r in engine.list_runs())
                if pending == 0:
                    break
                time.sleep(0.05)
            elapsed = time.perf_counter() - started
        finally:
            stop(procs)
            engine.close()
        return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--backends", default="sqlite,postgres")
    parser.add_argument("--pg", default=DEFAULT_PG)
    args = parser.parse_args()
    counts = [int(w) for w in args.workers.split(",")]
    print(
        f"{'backend':9} {'workers':>7} {'runs':>6} {'steps':>6} {'seconds':>8} "
        f"{'runs/s':>8} {'steps/s':>8} {'vs 1 worker':>11}"
    )
    for backend in args.backends.split(","):
        baseline: float | None = None
        for workers in counts:
            seconds = measure(backend, workers, args.runs, args.pg)
            rate = args.runs / seconds
            baseline = baseline or rate
            print(
                f"{backend:9} {workers:7d} {args.runs:6d} {args.runs * 5:6d} {seconds:8.2f} "
                f"{rate:8.1f} {rate * 5:8.1f} {rate / baseline:10.2f}x",
                flush=True,
            )


if __name__ == "__main__":
    main()
