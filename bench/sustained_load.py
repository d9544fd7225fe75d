"""A worker's memory under steady load: RSS every minute while runs keep arriving.

    .venv/bin/python bench/sustained_load.py [--minutes 10] [--rate 20] [--workers 1]
                                             [--backend sqlite|postgres] [--pg URL]

Real `flow worker` processes (`--workers`); this driver starts `--rate` runs of a five-step
chain per second for `--minutes` minutes and samples each worker's resident memory once a
minute. Prints each sample and the ratio of the last minute's RSS to minute 10's (minute 2's
in runs shorter than 20 minutes): a worker's memory must not keep growing with the runs it has
seen. Then it waits for every run to end and counts the lost (a run started but not completed
with the chain's result) and the duplicated (a step completed more than once).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from common import DEFAULT_PG, bench_worker, fresh_database, stop  # noqa: E402

STEPS = 5


def _rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=int, default=10)
    parser.add_argument("--rate", type=float, default=20.0, help="runs started per second")
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "postgres"])
    parser.add_argument("--pg", default=DEFAULT_PG, help="PostgreSQL server (a fresh schema)")
    parser.add_argument("--drain-seconds", type=float, default=600.0)
    args = parser.parse_args()

    import bench_workflows

    from flow_cli.engine.engine import Engine
    from flow_cli.store import open_store

    baseline_minute = 10 if args.minutes >= 20 else 2
    with fresh_database(args.backend, args.pg) as (url, scratch):
        # The engine first: were it to fail, no worker would be left running.
        engine = Engine(open_store(url), [bench_workflows.runtime])
        workers = [bench_worker(url, scratch) for _ in range(args.workers)]
        samples: list[list[float]] = []
        started = 0
        waited = 0.0
        try:
            t0 = time.monotonic()
            print(f"{args.backend}, {args.workers} worker(s), {args.rate:g} runs/s", flush=True)
            print("minute  runs started  worker RSS MB", flush=True)
            for minute in range(1, args.minutes + 1):
                while time.monotonic() < t0 + 60 * minute:
                    due = int((time.monotonic() - t0) * args.rate)
                    while started < due:
                        waited += _start(engine, started)
                        started += 1
                    time.sleep(0.05)
                samples.append([_rss_mb(w.pid) for w in workers])
                rss = "  ".join(f"{mb:7.1f}" for mb in samples[-1])
                print(f"{minute:6}  {started:12}  {rss}", flush=True)
            drained = _drain(engine, started, args.drain_seconds)
            lost, duplicated = _audit(engine, started)
        finally:
            stop(workers)
            engine.close()
    if len(samples) >= baseline_minute:
        ratios = "  ".join(
            f"{last / base:.3f}"
            for last, base in zip(samples[-1], samples[baseline_minute - 1], strict=True)
        )
        print(f"RSS at minute {len(samples)} / minute {baseline_minute}, per worker: {ratios}")
    print(f"drained in {drained:.0f} s; runs {started}, lost {lost}, duplicated {duplicated}")
    if waited:
        print(f"the driver waited {waited:.0f} s for the database (a restart or an outage)")


def _start(engine: object, i: int) -> float:
    """Start run ``s-i``, retrying while the database is unreachable (a start is idempotent);
    returns the seconds waited."""
    from flow_cli.engine.engine import Engine
    from flow_cli.errors import StoreError

    assert isinstance(engine, Engine)
    t0 = None
    while True:
        try:
            engine.start("chain", {"steps": STEPS, "x": i}, run_id=f"s-{i}")
            return 0.0 if t0 is None else time.monotonic() - t0
        except StoreError:
            t0 = time.monotonic() if t0 is None else t0
            time.sleep(1)


def _drain(engine: object, started: int, timeout: float) -> float:
    """Seconds until no run is open (or ``timeout``)."""
    from flow_cli.engine.engine import Engine

    assert isinstance(engine, Engine)
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if not any(not r.status.terminal for r in engine.list_runs()):
            break
        time.sleep(2)
    return time.monotonic() - t0


def _audit(engine: object, started: int) -> tuple[int, int]:
    """(runs not completed with the chain's result, steps completed more than once)."""
    from flow_cli.engine.engine import Engine

    assert isinstance(engine, Engine)
    lost = duplicated = 0
    for i in range(started):
        history = engine.history(f"s-{i}")
        end = history[-1].event if history else None
        if end is None or end.event_key() != "run_completed" or end.result != i + STEPS:
            lost += 1
        done = Counter(e.event.step_id for e in history if e.event_key == "step_completed")
        duplicated += sum(n - 1 for n in done.values() if n > 1)
    return lost, duplicated


if __name__ == "__main__":
    main()
