"""Starts from many threads of one process: starts/s and commits, one thread against several.

    .venv/bin/python bench/concurrent_starts.py [--starts N] [--threads 1,16] [--backend B]

One engine, as a web server's request threads would share it, starts N runs of the five-step
workflow (tests/load_workflows.py; no worker runs) from T threads at once. Starts that arrive
while another commits go together in its next transaction (``Engine.start``'s group
committer), so the store's durable commits fall below the starts. Figures are printed with the
ratio to the first thread count, measured in the same invocation.
"""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor

from common import DEFAULT_PG, fresh_database


def measure(backend: str, threads: int, starts: int, pg_url: str) -> tuple[float, int]:
    """Starts per second and the store's durable commits for them."""
    import load_workflows

    from flow_cli.engine.engine import Engine
    from flow_cli.store import open_store

    with fresh_database(backend, pg_url) as (url, _):
        engine = Engine(open_store(url), [load_workflows.runtime])
        try:
            engine.store.get_run("none")  # the schema exists before the clock starts
            before = engine.store.stats.durable_commits

            def start(index: int) -> None:
                engine.start("five-steps", {"effects": False}, run_id=f"start-{index:05d}")

            began = time.perf_counter()
            with ThreadPoolExecutor(threads) as pool:
                list(pool.map(start, range(starts)))
            seconds = time.perf_counter() - began
            return starts / seconds, engine.store.stats.durable_commits - before
        finally:
            engine.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--starts", type=int, default=1000)
    parser.add_argument("--threads", default="1,16")
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "postgres"])
    args = parser.parse_args()
    counts = [int(t) for t in args.threads.split(",")]
    print("backend   threads  starts/s  commits  ratio")
    first = None
    for threads in counts:
        rate, commits = measure(args.backend, threads, args.starts, DEFAULT_PG)
        first = first or rate
        print(f"{args.backend:8} {threads:8} {rate:9.0f} {commits:8} {rate / first:6.2f}")


if __name__ == "__main__":
    main()
