"""What flow-control limits cost, with a real `flow worker` process.

    .venv/bin/python bench/limits.py [--backends sqlite,postgres] [--repeats 3] [--quick]
        [--cases W1,W1+run-limit,W1-50,keyed] [--runs N]

(a) W1 (runs of 10 sequential steps, bench/workloads.py) with a generous step limit declared
(concurrency 100,000 and a rate of 10,000,000/1s: never reached) against no limit: steps/s,
and limited/free as a ratio.
(b) The same, while another workflow has a run limit declared too (case W1+run-limit), and
under a step limit of 50 (case W1-50): more than a worker runs at once, fewer than the steps
waiting, so attempts queue for slots and go through the lease of limited attempts.
(c) A 3-step workflow under `concurrency=1` per key with 100 keys, against the same workflow
unlimited: runs/s, and limited/free as a ratio (the target is at least 0.8).

Each figure comes from a fresh database and a fresh worker; the two sides are measured in this
process, interleaved (free, limited, free, limited, ...), and the ratio is of their medians;
the median of the pairs' own ratios is printed beside it. CPU per step (W1) or per run (keyed)
is printed too, steadier than throughput on a shared machine: the worker's (``wait4``) and, on
PostgreSQL, the local server's processes' (``/proc``; other sessions' work included).
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

TERMINAL = ("Completed", "Failed", "Cancelled", "ContinuedAsNew")


def _worker(url: str, scratch: Path, runtime: str) -> subprocess.Popen[bytes]:
    config = scratch / "flow.toml"
    config.write_text(f'[flow]\nruntimes = ["limit_bench_workflows:{runtime}"]\n', encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(HERE), FLOW_CONFIG=str(config), FLOW_DB=url)
    flow = str(Path(sys.executable).parent / "flow")
    proc = subprocess.Popen(
        [flow, "worker"], env=env, cwd=scratch, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
    )
    assert proc.stderr is not None
    proc.stderr.readline()  # the banner: the worker is up
    time.sleep(0.3)
    return proc


def _wait(engine: object, run_ids: list[str], timeout: float) -> bool:
    from flow_cli.engine.engine import Engine

    assert isinstance(engine, Engine)
    end = time.perf_counter() + timeout
    pending = list(run_ids)
    while time.perf_counter() < end:
        pending = [r for r in pending if engine.get_run(r).status.value not in TERMINAL]
        if not pending:
            return True
        time.sleep(0.05)
    return False


def _server_cpu() -> dict[str, float]:
    """CPU seconds of each local PostgreSQL process (by pid), from ``/proc``."""
    tick = os.sysconf("SC_CLK_TCK")
    found: dict[str, float] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/comm") as f:
                if not f.read().startswith("postgres"):
                    continue
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # ended meanwhile
        found[pid] = (int(fields[11]) + int(fields[12])) / tick
    return found


def _stopped_cpu(worker: subprocess.Popen[bytes]) -> float:
    """Stop the worker; its CPU seconds (user and system)."""
    worker.terminate()
    _, status, usage = os.wait4(worker.pid, 0)
    worker.returncode = os.waitstatus_to_exitcode(status)
    return usage.ru_utime + usage.ru_stime


def measure(
    case: str, runtime_name: str, backend: str, quick: bool, runs: int | None = None
) -> tuple[float, float, float]:
    """Steps/s (case W1) or runs/s (case keyed) of one fresh database and worker, and the
    worker's and the local PostgreSQL server's CPU microseconds per step (or run); ``runs``
    overrides how many runs are started (W1: 300 of ten steps, keyed: 500)."""
    import limit_bench_workflows

    from flow_cli.engine.engine import Engine
    from flow_cli.store import open_store

    runtime = getattr(limit_bench_workflows, runtime_name)
    with fresh_database(backend, DEFAULT_PG) as (url, scratch):
        # The engine first: were it to fail (a schema it refuses), no worker would be left running.
        engine = Engine(open_store(url), [runtime], eager_start=True)
        worker = _worker(url, scratch, runtime_name)
        server = _server_cpu() if backend == "postgres" else {}
        try:
            t0 = time.perf_counter()
            if case == "W1":
                runs = runs or (100 if quick else 300)
                ids = [f"w1-{i}" for i in range(runs)]
                for i, run_id in enumerate(ids):
                    engine.start("chain", {"steps": 10, "x": i}, run_id=run_id)
                assert _wait(engine, ids, 600), "W1 did not complete"
                units = 10 * runs
            else:
                runs = runs or (200 if quick else 500)
                ids = [f"k-{i}" for i in range(runs)]
                for i, run_id in enumerate(ids):
                    engine.start("keyed", {"key": f"customer-{i % 100}", "x": i}, run_id=run_id)
                assert _wait(engine, ids, 600), "keyed runs did not complete"
                units = runs
            rate = units / (time.perf_counter() - t0)
            after = _server_cpu() if backend == "postgres" else {}
            served = sum(cpu - server.get(pid, 0.0) for pid, cpu in after.items())
            worked = _stopped_cpu(worker)
            return rate, worked / units * 1e6, served / units * 1e6
        finally:
            stop([worker])
            engine.close()


CASES = {
    "W1": ("W1", "generous", "steps/s", "W1, generous step limit vs none"),
    "W1+run-limit": (
        "W1",
        "both",
        "steps/s",
        "W1, generous step limit and another workflow's run limit vs none",
    ),
    "W1-50": ("W1", "modest", "steps/s", "W1, a step limit of 50 vs none"),
    "keyed": ("keyed", "per_key", "runs/s", "3 steps, concurrency=1 per key (100 keys) vs none"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", default="sqlite")
    parser.add_argument("--cases", default=",".join(CASES), help="of: " + ", ".join(CASES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument(
        "--runs", type=int, help="runs a measurement starts (W1: 300 of ten steps; keyed: 500)"
    )
    args = parser.parse_args()
    for backend in args.backends.split(","):
        for name in args.cases.split(","):
            case, runtime, unit, what = CASES[name]
            free: list[tuple[float, float, float]] = []
            limited: list[tuple[float, float, float]] = []
            for _ in range(args.repeats):
                free.append(measure(case, "free", backend, args.quick, args.runs))
                limited.append(measure(case, runtime, backend, args.quick, args.runs))
            f = statistics.median(x[0] for x in free)
            g = statistics.median(x[0] for x in limited)
            pairs = statistics.median(b[0] / a[0] for a, b in zip(free, limited, strict=True))
            per = unit.split("/")[0].rstrip("s")
            cpu = "; ".join(
                f"{side} {statistics.median(x[1] for x in got):.0f} + "
                f"{statistics.median(x[2] for x in got):.0f}"
                for side, got in (("free", free), ("limited", limited))
            )
            print(
                f"{backend:8} {what}: free {f:,.0f} {unit} {[round(x[0]) for x in free]}, "
                f"limited {g:,.0f} {unit} {[round(x[0]) for x in limited]}, ratio {g / f:.2f} "
                f"(median of the pairs' ratios {pairs:.2f}); CPU µs per {per}, worker + "
                f"server: {cpu}",
                flush=True,
            )


if __name__ == "__main__":
    main()
