"""What heartbeats cost the hot path: W1 (1,000 runs x 10 sequential steps, steps/s) alone, and
while 50 steps of another worker heartbeat every 100 ms, interleaved.

    .venv/bin/python bench/heartbeats.py [--backends sqlite,postgres] [--rounds 2] [--quick]

A heartbeat is kept in memory and stored with the worker's next lease renewal (at most one
write per renewal round per step): the beaters cost the W1 worker the renewals' writes on the
shared database and the CPU of 50 sleeping threads. Prints steps/s of each round and the ratio
with / without (1.00 = no cost; the bar is 0.95).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from common import DEFAULT_PG, fresh_database, stop  # noqa: E402

BEATERS = 50
EVERY = 0.1


def _worker(url: str, scratch: Path, runtime: str, *extra: str) -> subprocess.Popen[bytes]:
    name = runtime.split(":")[0]
    env = dict(os.environ)
    env["PYTHONPATH"] = str(HERE)
    env["FLOW_CONFIG"] = str(scratch / f"{name}.toml")
    env["FLOW_DB"] = url
    (scratch / f"{name}.toml").write_text(f'[flow]\nruntimes = ["{runtime}"]\n', encoding="utf-8")
    flow = str(Path(sys.executable).parent / "flow")
    proc = subprocess.Popen(
        [flow, "worker", *extra],
        env=env,
        cwd=scratch,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    assert proc.stderr is not None
    proc.stderr.readline()  # the banner: the worker is up
    time.sleep(0.3)
    return proc


def w1(backend: str, runs: int, beaters: bool) -> float:
    """W1's steps/s, with or without 50 steps heartbeating meanwhile."""
    import bench_workflows
    import heartbeat_workflows

    from flow_cli.engine.engine import Engine
    from flow_cli.store import open_store

    with fresh_database(backend, DEFAULT_PG) as (url, scratch):
        engine = Engine(open_store(url), [bench_workflows.runtime, heartbeat_workflows.runtime])
        workers = [_worker(url, scratch, "bench_workflows:runtime")]
        try:
            if beaters:
                workers.append(
                    _worker(
                        url, scratch, "heartbeat_workflows:runtime", "--concurrency", str(BEATERS)
                    )
                )
                for i in range(BEATERS):
                    engine.start("beater", {"secs": 600, "every": EVERY}, run_id=f"beat-{i}")
                while sum(
                    1 for r in engine.list_runs(workflow="beater") if r.status.value == "Running"
                ) < BEATERS or not all(engine.step_heartbeats(f"beat-{i}") for i in range(3)):
                    time.sleep(0.2)
            t0 = time.perf_counter()
            for i in range(runs):
                engine.start("chain", {"steps": 10, "x": i}, run_id=f"w1-{i}")
            pending = [f"w1-{i}" for i in range(runs)]
            while pending:
                pending = [r for r in pending if engine.get_run(r).status.value != "Completed"]
                time.sleep(0.05)
            return 10 * runs / (time.perf_counter() - t0)
        finally:
            stop(workers)
            engine.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--backends", default="sqlite")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    runs = 200 if args.quick else 1000
    for backend in args.backends.split(","):
        alone: list[float] = []
        beating: list[float] = []
        for _ in range(args.rounds):
            alone.append(w1(backend, runs, beaters=False))
            beating.append(w1(backend, runs, beaters=True))
            print(f"{backend}  W1 alone {alone[-1]:8.1f} steps/s   with beaters {beating[-1]:8.1f}")
        ratio = statistics.median(beating) / statistics.median(alone)
        print(f"{backend}  median ratio with/without {BEATERS} beaters every {EVERY}s: {ratio:.3f}")


if __name__ == "__main__":
    main()
