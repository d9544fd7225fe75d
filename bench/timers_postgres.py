"""Many timers on PostgreSQL: does each fire exactly once, never early, and how late?

    .venv/bin/python bench/timers_postgres.py [--runs 10000] [--workers 2] [--delay 120]

Starts RUNS runs of a workflow that sleeps until ``started_at + DELAY`` seconds (start times are
spread over however long starting takes), with WORKERS real `flow worker` processes running all
along. Then waits until every run completed (or a deadline passed) and prints: runs completed,
timers lost (never fired), duplicated (more than one ``wait_completed``), early (fired before
the deadline), and the lateness (``recorded_at`` of ``wait_completed`` minus the deadline) at
p50, p99 and max. Not a test: figures depend on the machine.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from common import DEFAULT_PG, ROOT, fresh_database, stop

from flow_cli import Runtime

BENCH = Path(__file__).resolve().parent
runtime = Runtime(build_id="timers-bench-1")
DELAY = float(os.environ.get("FLOW_BENCH_TIMER_DELAY", "120"))


@runtime.workflow("nap")
def nap(ctx: Any) -> Any:
    ctx.sleep("nap", timedelta(seconds=DELAY))
    return ctx.complete("rested")


def _spawn(url: str, scratch: Path, delay: float) -> subprocess.Popen[bytes]:
    (scratch / "flow.toml").write_text(
        '[flow]\nruntimes = ["timers_postgres:runtime"]\n', encoding="utf-8"
    )
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests"), str(BENCH)])
    env["FLOW_CONFIG"] = str(scratch / "flow.toml")
    env["FLOW_DB"] = url
    env["FLOW_BENCH_TIMER_DELAY"] = str(delay)
    flow = shutil.which("flow", path=str(Path(sys.executable).parent)) or "flow"
    return subprocess.Popen(
        [flow, "worker", "--concurrency", "2", "--lease-seconds", "15"],
        env=env,
        cwd=scratch,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def measure(runs: int, workers: int, delay: float, pg_url: str, timeout: float) -> dict[str, Any]:
    from flow_cli.engine.engine import Engine
    from flow_cli.model.status import RunStatus
    from flow_cli.store import open_store

    with fresh_database("postgres", pg_url) as (url, scratch):
        engine = Engine(open_store(url), [runtime])
        procs = [_spawn(url, scratch, delay) for _ in range(workers)]
        try:
            began = time.monotonic()
            for index in range(runs):
                engine.start("nap", None, run_id=f"nap-{index:05d}")
            started_in = time.monotonic() - began
            deadline = time.monotonic() + delay + timeout
            while time.monotonic() < deadline:
                done = len(engine.list_runs(status=RunStatus.COMPLETED))
                if done == runs:
                    break
                time.sleep(2)
            late: list[float] = []
            lost = duplicated = early = 0
            for record in engine.list_runs():
                history = engine.history(record.run_id)
                started = history[0].recorded_at
                fired = [e for e in history if e.event.event_key() == "wait_completed"]
                if not fired:
                    lost += 1
                    continue
                duplicated += len(fired) > 1
                seconds = (fired[0].recorded_at - started).total_seconds() - delay
                early += seconds < 0
                late.append(seconds * 1000)
        finally:
            stop(procs)
            engine.close()
    late.sort()
    return {
        "runs": runs,
        "start_seconds": started_in,
        "completed": len(late),
        "lost": lost,
        "duplicated": duplicated,
        "early": early,
        "p50_ms": statistics.median(late) if late else float("nan"),
        "p99_ms": late[max(0, int(len(late) * 0.99) - 1)] if late else float("nan"),
        "max_ms": late[-1] if late else float("nan"),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--delay", type=float, default=DELAY, help="seconds each run sleeps")
    parser.add_argument("--timeout", type=float, default=300, help="seconds to wait after that")
    parser.add_argument("--pg", default=DEFAULT_PG)
    args = parser.parse_args()
    result = measure(args.runs, args.workers, args.delay, args.pg, args.timeout)
    print(
        f"{result['runs']} runs started in {result['start_seconds']:.1f} s; "
        f"completed {result['completed']}, lost {result['lost']}, "
        f"duplicated {result['duplicated']}, early {result['early']}; lateness "
        f"p50 {result['p50_ms']:.0f} ms, p99 {result['p99_ms']:.0f} ms, "
        f"max {result['max_ms']:.0f} ms"
    )


if __name__ == "__main__":
    main()
