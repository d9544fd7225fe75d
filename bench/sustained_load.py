"""A worker's memory under steady load: RSS every minute while runs keep arriving.

    .venv/bin/python bench/sustained_load.py [--minutes 10] [--rate 20] [--backend sqlite]

One real `flow worker` process; this driver starts `--rate` runs of a five-step chain per
second for `--minutes` minutes and samples the worker's resident memory once a minute. Prints
each sample and the ratio of the last minute's RSS to the second minute's (the issue's figure:
a worker's memory must not keep growing with the runs it has seen).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from common import DEFAULT_PG, bench_worker, fresh_database, stop  # noqa: E402


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--rate", type=float, default=20.0, help="runs started per second")
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "postgres"])
    args = parser.parse_args()

    import bench_workflows

    from flow_cli.engine.engine import Engine
    from flow_cli.store import open_store

    with fresh_database(args.backend, DEFAULT_PG) as (url, scratch):
        worker = bench_worker(url, scratch)
        engine = Engine(open_store(url), [bench_workflows.runtime])
        samples: list[float] = []
        started = 0
        try:
            t0 = time.monotonic()
            print("minute  runs started  worker RSS MB", flush=True)
            for minute in range(1, args.minutes + 1):
                while time.monotonic() < t0 + 60 * minute:
                    due = int((time.monotonic() - t0) * args.rate)
                    while started < due:
                        engine.start("chain", {"steps": 5, "x": started}, run_id=f"s-{started}")
                        started += 1
                    time.sleep(0.05)
                samples.append(_rss_mb(worker.pid))
                print(f"{minute:6}  {started:12}  {samples[-1]:13.1f}", flush=True)
        finally:
            stop([worker])
            engine.close()
    if len(samples) >= 2:
        print(f"RSS at minute {len(samples)} / minute 2: {samples[-1] / samples[1]:.2f}")


if __name__ == "__main__":
    main()
