"""Talking to runs: `flow query` on a long history, and an update's round trip to a worker.

    .venv/bin/python bench/talk.py [--events 2000] [--queries 20] [--updates 30] [--backend sqlite]

1. A run of bench_workflows' ``talk`` with a history of about --events events (steps, then a
   signal wait). ``flow query RUN progress`` is run as a real process --queries times (what a
   user types; Python's start-up and imports included, about what ``flow show`` costs) and
   ``engine.query`` in process on a cold cache (read the history, project it, run the
   handler); medians printed.
2. With one live ``flow worker``, each of --updates runs (steps 0) waits on a signal; the script
   sends ``finish`` through the engine API (what ``flow update`` calls) and waits for the run to
   end. Printed: the update call (handler + append), the worker's resume (recorded_at of
   run_completed minus update_applied), and the round trip (call start to run_completed
   committed, this machine's clock), medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from common import DEFAULT_PG, bench_worker, fresh_database, stop

HERE = Path(__file__).resolve().parent


def median_ms(values: list[float]) -> str:
    return f"{statistics.median(values):.1f}"


def queries(url: str, scratch: Path, events: int, count: int) -> None:
    import bench_workflows

    from flow_cli.engine.engine import Engine
    from flow_cli.store import open_store

    steps = max(1, (events - 3) // 3)
    engine = Engine(open_store(url), [bench_workflows.runtime])
    engine.start("talk", {"steps": steps}, run_id="long")
    engine.tick(until_idle=True)
    length = engine.snapshot("long").last_sequence
    in_process = []
    for _ in range(count):
        began = time.perf_counter()
        engine.streams.forget("long")  # cold: the history is read and projected each time
        engine.query("long", "progress")
        in_process.append((time.perf_counter() - began) * 1000)
    engine.close()
    (scratch / "flow.toml").write_text(
        '[flow]\nruntimes = ["bench_workflows:runtime"]\nbuild_id = "bench-1"\n', encoding="utf-8"
    )
    # flow.toml found in the working directory, as a user has it.
    # PYTHONDONTWRITEBYTECODE would compile all of Flow from source in every process (~100 ms):
    # an installed Flow has its bytecode cached, as the first of these processes leaves it.
    env = {
        k: v for k, v in os.environ.items() if k not in ("FLOW_CONFIG", "PYTHONDONTWRITEBYTECODE")
    }
    env.update(PYTHONPATH=str(HERE), FLOW_DB=url)
    flow = str(Path(sys.executable).parent / "flow")

    def timed(*args: str) -> list[float]:
        taken = []
        for _ in range(count):
            began = time.perf_counter()
            done = subprocess.run(
                [flow, *args], env=env, cwd=scratch, capture_output=True, check=False
            )
            taken.append((time.perf_counter() - began) * 1000)
            if done.returncode != 0:
                raise SystemExit(f"flow {' '.join(args)} failed: {done.stderr.decode()}")
        return taken

    cli = timed("query", "long", "progress")
    show = timed("show", "long", "--json")
    print(
        f"flow query on a {length}-event history: median {median_ms(cli)} ms per process "
        f"(min {min(cli):.1f}; flow show --json of the same run: {median_ms(show)} ms), "
        f"engine.query in process {median_ms(in_process)} ms ({count} each)",
        flush=True,
    )


def updates(url: str, scratch: Path, count: int) -> None:
    import bench_workflows

    from flow_cli.engine.engine import Engine
    from flow_cli.store import open_store

    engine = Engine(open_store(url), [bench_workflows.runtime])
    worker = bench_worker(url, scratch)
    calls, resumes, trips = [], [], []
    try:
        for index in range(count):
            run_id = f"upd-{index:03d}"
            engine.start("talk", {"steps": 0}, run_id=run_id)
            while "never" not in engine.snapshot(run_id).signal_waits:
                time.sleep(0.01)
            time.sleep(0.2)  # let the worker go idle
            began = time.perf_counter()
            sent_at = datetime.now(UTC)
            engine.update(run_id, "finish", index)
            calls.append((time.perf_counter() - began) * 1000)
            while engine.get_run(run_id).status.value != "Completed":
                time.sleep(0.001)
            history = engine.history(run_id)
            applied = next(e for e in history if e.event_key == "update_applied")
            done = history[-1]
            resumes.append((done.recorded_at - applied.recorded_at).total_seconds() * 1000)
            trips.append((done.recorded_at - sent_at).total_seconds() * 1000)
    finally:
        stop([worker])
        engine.close()
    print(
        f"update round trip with a live worker: median {median_ms(trips)} ms "
        f"(update call {median_ms(calls)} ms, worker resume {median_ms(resumes)} ms; "
        f"max trip {max(trips):.1f} ms; {count} updates)",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=2000)
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--updates", type=int, default=30)
    parser.add_argument("--backend", default="sqlite")
    parser.add_argument("--pg", default=DEFAULT_PG)
    args = parser.parse_args()
    with fresh_database(args.backend, args.pg) as (url, scratch):
        queries(url, scratch, args.events, args.queries)
    with fresh_database(args.backend, args.pg) as (url, scratch):
        updates(url, scratch, args.updates)


if __name__ == "__main__":
    main()
