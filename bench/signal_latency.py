"""How fast an idle worker resumes a run after `flow signal`.

    .venv/bin/python bench/signal_latency.py [--signals 50] [--backends postgres,sqlite]

One `flow worker` process idles (on LISTEN/NOTIFY for PostgreSQL, polling the SQLite file's
data_version for SQLite). For each of N runs waiting on a signal, the script waits until the
worker is idle, sends the signal through the engine API (what `flow signal` calls), and takes
the latency as recorded_at(run_completed) - recorded_at(signal_received): from the signal's
commit to the resumed decision's commit, both stamped by this machine's clock.
"""

from __future__ import annotations

import argparse
import statistics
import time

from common import DEFAULT_PG, fresh_database, spawn_worker, stop


def measure(backend: str, signals: int, pg_url: str) -> list[float]:
    import load_workflows

    from flow_cli.engine.engine import Engine
    from flow_cli.store import open_store

    latencies: list[float] = []
    with fresh_database(backend, pg_url) as (url, scratch):
        engine = Engine(open_store(url), [load_workflows.runtime])
        procs = [spawn_worker(url, scratch, concurrency=1)]
        try:
            for index in range(signals):
                run_id = f"latency-{index:03d}"
                engine.start("wait-signal", {}, run_id=run_id)
                while "go" not in engine.snapshot(run_id).signal_waits:
                    time.sleep(0.02)
                time.sleep(0.3)  # let the worker go idle
                engine.signal(run_id, "go", {"n": index})
                while not engine.snapshot(run_id).terminal:
                    time.sleep(0.005)
                history = engine.history(run_id)
                sent = next(e for e in history if e.event_key == "signal_received")
                done = history[-1]
                latencies.append((done.recorded_at - sent.recorded_at).total_seconds() * 1000)
        finally:
            stop(procs)
            engine.close()
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--signals", type=int, default=50)
    parser.add_argument("--backends", default="postgres,sqlite")
    parser.add_argument("--pg", default=DEFAULT_PG)
    args = parser.parse_args()
    print(f"{'backend':9} {'signals':>7} {'median ms':>10} {'p90 ms':>8} {'max ms':>8}")
    for backend in args.backends.split(","):
        values = sorted(measure(backend, args.signals, args.pg))
        p90 = values[int(len(values) * 0.9) - 1]
        print(
            f"{backend:9} {len(values):7d} {statistics.median(values):10.1f} {p90:8.1f} "
            f"{values[-1]:8.1f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
