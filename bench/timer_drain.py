"""How fast timers that come due at the same instant fire and move on (issue 7, W4).

    .venv/bin/python bench/timer_drain.py [--runs 10000] [--backend sqlite|postgres] [--strace]
        [--workers 1]  (BENCH_WORKER_ARGS="--processes 2": one command, two processes)

N runs sleep until one absolute instant (then run one step and complete); real `flow worker`
processes serve them (one unless --workers says more: one per core lets the drain use them
all). Prints the first worker's threads while they sleep, the runs drained per second from the
instant they came due until the last one completed, the workers' CPU seconds (user + system)
per run over the drain, and the first worker's commits per run (its database file's flushes:
with ``--strace``, the fsync/fdatasync calls strace counts while attached to it for the drain;
strace slows the worker, so runs/s is not comparable then).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from common import DEFAULT_PG, bench_worker, fresh_database, stop  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "postgres"])
    parser.add_argument("--workers", type=int, default=1, help="worker processes")
    parser.add_argument(
        "--strace", action="store_true", help="count the worker's flushes (needs strace)"
    )
    args = parser.parse_args()
    if args.strace and shutil.which("strace") is None:
        parser.error("--strace needs the strace program")

    import bench_workflows

    from flow_cli.engine.engine import Engine
    from flow_cli.model.status import RunStatus
    from flow_cli.store import open_store

    with fresh_database(args.backend, DEFAULT_PG) as (url, scratch):
        workers = [bench_worker(url, scratch) for _ in range(args.workers)]
        worker = workers[0]
        setup_url = url + ("?synchronous=NORMAL" if args.backend == "sqlite" else "")
        engine = Engine(open_store(setup_url), [bench_workflows.runtime])
        try:
            # Far enough ahead for every run to be started and asleep first.
            at = datetime.now(UTC) + timedelta(seconds=10 + args.runs / 400)
            for i in range(args.runs):
                engine.start("alarm", {"at": at.isoformat()}, run_id=f"alarm-{i}")
            while len(engine.list_runs(status=RunStatus.SUSPENDED)) < args.runs:
                time.sleep(0.5)
            threads = len(os.listdir(f"/proc/{worker.pid}/task"))
            tracer = _strace(worker.pid) if args.strace else None
            time.sleep(max(0.0, (at - datetime.now(UTC)).total_seconds()))
            cpu = sum(_cpu_seconds(w.pid) for w in workers)
            started = time.perf_counter()
            while engine.get_run(f"alarm-{args.runs - 1}").status is not RunStatus.COMPLETED or (
                len(engine.list_runs(status=RunStatus.COMPLETED)) < args.runs
            ):
                time.sleep(0.02)
            seconds = time.perf_counter() - started
            cpu = sum(_cpu_seconds(w.pid) for w in workers) - cpu
            flushes = _flushes(tracer) if tracer is not None else None
        finally:
            stop(workers)
            engine.close()
    flushed = "-" if flushes is None else f"{flushes / args.runs:.3f}"
    print(
        "backend   runs  workers  worker threads asleep  drain seconds  runs/s  cpu ms/run  "
        "flushes/run"
    )
    print(
        f"{args.backend:8} {args.runs:6}  {args.workers:7}  {threads:21}  {seconds:13.2f}"
        f"  {args.runs / seconds:6.0f}  {1000 * cpu / args.runs:10.3f}  {flushed:>11}"
    )


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds the process and its children (``flow worker --processes``)
    have used, all their threads."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    own = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as listing:
            children = [int(child) for child in listing.read().split()]
    except OSError:
        children = []
    return own + sum(_cpu_seconds(child) for child in children)


def _strace(pid: int) -> subprocess.Popen[str]:
    """strace attached to every thread of ``pid``, counting its flushes until interrupted."""
    tracer = subprocess.Popen(
        ["strace", "-c", "-f", "-e", "trace=fsync,fdatasync", "-p", str(pid)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(1.0)  # attached before the timers come due
    return tracer


def _flushes(tracer: subprocess.Popen[str]) -> int:
    tracer.send_signal(2)  # SIGINT: strace detaches and prints its table
    _, table = tracer.communicate(timeout=30)
    # Rows: % time, seconds, usecs/call, calls, [errors,] syscall (the "total" row is left out).
    row = r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(?:fsync|fdatasync)\s*$"
    return sum(int(m.group(1)) for m in re.finditer(row, table, re.M))


if __name__ == "__main__":
    main()
