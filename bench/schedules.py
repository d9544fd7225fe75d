"""Schedules (issue 30): a burst of fire times, and what firing costs an idle worker.

    .venv/bin/python bench/schedules.py [--schedules 1000] [--idle-seconds 10] [--backend sqlite]

1. Burst: N schedules whose cron expressions all fire at the same minute; one real `flow
   worker` process. Prints how long after the fire time the first, the median and the last run
   was created (the runs index's creation times, so polling adds nothing), and the worker's CPU
   seconds over the burst.
2. Idle loop, paired: the same worker with no schedule at all, then with N schedules due a year
   from now. Prints the worker's CPU seconds per idle second in both, and the cost of the one
   look a worker makes (`next_schedule_due`, an index probe) measured in this process, with
   SQLite's query plan for it.

With --paired-threads, only bursts, the worker firing a claim's schedules on 1 thread and on 8
(``FLOW_SCHEDULE_THREADS``), interleaved, twice.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from common import DEFAULT_PG, ROOT, fresh_database, stop  # noqa: E402

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def worker(url: str, scratch: Path, threads: int | None = None) -> subprocess.Popen[bytes]:
    """A real `flow worker` hosting tests/schedule_workflows.py, idle before this returns."""
    (scratch / "flow.toml").write_text(
        '[flow]\nruntimes = ["schedule_workflows:runtime"]\n', encoding="utf-8"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "tests")]))
    env.update(FLOW_CONFIG=str(scratch / "flow.toml"), FLOW_DB=url)
    if threads is not None:
        env["FLOW_SCHEDULE_THREADS"] = str(threads)
    process = subprocess.Popen(
        [str(Path(sys.executable).parent / "flow"), "worker"],
        env=env,
        cwd=scratch,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    if process.stderr is not None:
        process.stderr.readline()  # its banner: registered and looping
    return process


def burst(backend: str, count: int, threads: int | None = None) -> None:
    from schedule_workflows import runtime

    from flow_cli.engine.engine import Engine
    from flow_cli.model.schedule import ScheduleSpec

    with fresh_database(backend, DEFAULT_PG) as (url, scratch):
        engine = Engine.open(url, [runtime])
        now = datetime.now(UTC)
        # The next minute that leaves time to create every schedule first.
        fire = (now + timedelta(seconds=20 + count / 200)).replace(second=0, microsecond=0)
        fire += timedelta(minutes=1)
        for n in range(count):
            engine.schedules.create(
                ScheduleSpec(
                    schedule_id=f"burst-{n:04d}",
                    workflow="report",
                    cron=f"{fire.minute} {fire.hour} * * *",
                )
            )
        process = worker(url, scratch, threads)
        try:
            while datetime.now(UTC) < fire - timedelta(seconds=1):
                time.sleep(0.2)
            before = cpu_seconds(process.pid)
            deadline = time.monotonic() + 120
            while len(engine.list_runs()) < count and time.monotonic() < deadline:
                time.sleep(0.2)
            spent = cpu_seconds(process.pid) - before
        finally:
            stop([process])
        runs = engine.list_runs()
        lags = sorted((r.created_at - fire).total_seconds() for r in runs)
        engine.close()
    label = "" if threads is None else f", FLOW_SCHEDULE_THREADS={threads}"
    print(f"burst ({backend}{label}): {count} schedules firing at {fire:%H:%M:%S}Z, one worker")
    print(f"  runs started: {len(runs)} of {count}")
    if lags:
        print(
            f"  after the fire time: first {lags[0]:.3f} s, median "
            f"{statistics.median(lags):.3f} s, last {lags[-1]:.3f} s"
        )
    print(f"  worker CPU over the burst: {spent:.2f} s")


def idle(backend: str, count: int, seconds: float) -> None:
    from schedule_workflows import runtime

    from flow_cli.engine.engine import Engine
    from flow_cli.model.schedule import ScheduleSpec

    results: dict[int, float] = {}
    probes: dict[int, float] = {}
    for schedules in (0, count):
        with fresh_database(backend, DEFAULT_PG) as (url, scratch):
            engine = Engine.open(url, [runtime])
            start = datetime.now(UTC) + timedelta(days=365)
            for n in range(schedules):
                engine.schedules.create(
                    ScheduleSpec(
                        schedule_id=f"later-{n:04d}",
                        workflow="report",
                        every=timedelta(hours=1),
                        start_at=start,
                    )
                )
            process = worker(url, scratch)
            try:
                time.sleep(2)  # past its start-up
                before = cpu_seconds(process.pid)
                time.sleep(seconds)
                results[schedules] = (cpu_seconds(process.pid) - before) / seconds
            finally:
                stop([process])
            store = engine.store
            rounds = 2000
            began = time.perf_counter()
            for _ in range(rounds):
                store.next_schedule_due()
            probes[schedules] = (time.perf_counter() - began) / rounds * 1e6
            if backend == "sqlite" and schedules:
                conn = store._conn()  # type: ignore[attr-defined]
                plan = conn.execute(
                    "EXPLAIN QUERY PLAN SELECT due_at FROM schedules WHERE due_at IS NOT NULL "
                    "ORDER BY due_at LIMIT 1"
                ).fetchall()
                print(f"  query plan of the look: {[row[-1] for row in plan]}")
            engine.close()
    print(f"idle loop ({backend}), {seconds:.0f} s each, paired:")
    for schedules in (0, count):
        print(
            f"  {schedules:>5} future schedules: worker CPU {results[schedules] * 1000:.1f} ms "
            f"per idle second; next_schedule_due {probes[schedules]:.1f} µs per look"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--schedules", type=int, default=1000)
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "postgres"])
    parser.add_argument(
        "--paired-threads",
        action="store_true",
        help="only bursts, interleaved: the worker firing on 1 thread, then on 8, twice",
    )
    args = parser.parse_args()
    if args.paired_threads:
        for _ in range(2):
            for threads in (1, 8):
                burst(args.backend, args.schedules, threads)
        return
    burst(args.backend, args.schedules)
    idle(args.backend, args.schedules, args.idle_seconds)


if __name__ == "__main__":
    main()
