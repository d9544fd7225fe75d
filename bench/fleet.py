"""Many workers on one PostgreSQL while runs arrive: does the fleet grow without slowing?

    .venv/bin/python bench/fleet.py [--workers 1,2,4] [--runs 1000] [--steps 10]
        [--starters 4] [--pg URL] [--backend postgres|sqlite]

For each worker count: a fresh database, N real `flow worker` processes (idle, banners read),
then ``--runs`` runs of the ``chain`` workflow (``--steps`` sequential trivial steps) started
from ``--starters`` threads of this process *while* the workers work. Printed per count: steps
per second from the first start to the last completion, the median start latency (ms), and the
workers' CPU seconds per 1,000 steps (user + system, from /proc), and how busy the machine was
meanwhile (every process: the workers, the database server, the starting threads; anything
else running shows here too), which bounds what more workers could add. Ratios are to the
first count, measured in the same invocation: this machine is noisy.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from common import DEFAULT_PG, bench_worker, fresh_database, stop  # noqa: E402

TERMINAL = ("Completed", "Failed", "Cancelled")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_busy() -> tuple[float, float]:
    """Busy and total CPU seconds of the whole machine so far (every core, every process)."""
    ticks = [int(n) for n in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle + iowait
    hz = os.sysconf("SC_CLK_TCK")
    return (sum(ticks[:8]) - idle) / hz, sum(ticks[:8]) / hz


def measure(backend: str, workers: int, runs: int, steps: int, starters: int, pg: str) -> dict:
    import bench_workflows

    from flow_cli.engine.engine import Engine
    from flow_cli.store import open_store

    with fresh_database(backend, pg) as (url, scratch):
        engine = Engine(open_store(url), [bench_workflows.runtime])
        fleet = [bench_worker(url, scratch) for _ in range(workers)]
        try:
            cpu_before = sum(_cpu_seconds(w.pid) for w in fleet)
            busy_before, total_before = _machine_busy()
            latencies: list[float] = []

            def start(i: int) -> None:
                began = time.perf_counter()
                engine.start("chain", {"steps": steps, "x": 0}, run_id=f"f-{i:06d}")
                latencies.append(time.perf_counter() - began)

            began = time.perf_counter()
            with ThreadPoolExecutor(starters) as pool:
                list(pool.map(start, range(runs)))
            while True:
                counted = engine.count_runs(_open_filter()).total
                if counted == 0:
                    break
                time.sleep(0.05)
            taken = time.perf_counter() - began
            cpu = sum(_cpu_seconds(w.pid) for w in fleet) - cpu_before
            busy, total = _machine_busy()
            busy, total = busy - busy_before, total - total_before
        finally:
            stop(fleet)
            engine.close()
    total_steps = runs * steps
    return {
        "steps_per_s": total_steps / taken,
        "start_ms": statistics.median(latencies) * 1000,
        "cpu_per_1000": cpu / total_steps * 1000,
        "machine_busy": busy / total,
        "workers_share": cpu / total,
    }


def _open_filter():  # type: ignore[no-untyped-def]
    from flow_cli.model.status import RunStatus
    from flow_cli.store.protocol import RunFilter

    return RunFilter(statuses=tuple(s for s in RunStatus if s.value not in TERMINAL))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--starters", type=int, default=4)
    parser.add_argument("--backend", default="postgres", choices=["postgres", "sqlite"])
    parser.add_argument("--pg", default=DEFAULT_PG)
    options = parser.parse_args()
    first: dict | None = None
    for count in [int(n) for n in options.workers.split(",")]:
        got = measure(
            options.backend, count, options.runs, options.steps, options.starters, options.pg
        )
        first = first or got
        print(
            f"{count} worker(s): {got['steps_per_s']:,.0f} steps/s "
            f"({got['steps_per_s'] / first['steps_per_s']:.2f}x), "
            f"start {got['start_ms']:.1f} ms median "
            f"({got['start_ms'] / first['start_ms']:.2f}x), "
            f"workers' CPU {got['cpu_per_1000']:.2f} s per 1,000 steps "
            f"({got['cpu_per_1000'] / first['cpu_per_1000']:.2f}x); machine busy "
            f"{got['machine_busy']:.0%} of {os.cpu_count()} cores, the workers "
            f"{got['workers_share']:.0%}",
            flush=True,
        )


if __name__ == "__main__":
    main()
