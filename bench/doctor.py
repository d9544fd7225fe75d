"""`flow doctor` over 100,000 open runs: is it fast enough for a cron job?

    .venv/bin/python bench/doctor.py [--runs 100000] [--db postgresql://...] [--repeat 3]

Without ``--db`` the database is a fresh SQLite file; with a ``postgresql://`` URL, a fresh
schema in that database (dropped afterwards). The open runs are written straight into the
runs and step task indexes in bulk (``executemany`` on SQLite, ``COPY`` on PostgreSQL) — the
doctor reads nothing else, so their histories are left out — in a mix of every state:

    40 % waiting on a signal     10 % waiting on a hook      10 % timer not due yet
    10 % timer overdue           10 % step retrying          10 % decision failing
    10 % of a build no live worker hosts

One live worker hosting the main build is registered. Figures: the engine call
(``flow_cli.ops.doctor.diagnose``, in process) and the wall time of a real
``flow doctor --json`` process (start-up and JSON output of every run included), best of
``--repeat``, and each command's peak RSS (one more run; with ``--baseline FLOW``, another
checkout's ``flow`` measured the same way beside it).
"""

from __future__ import annotations

import argparse
import io
import os
import sqlite3
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from common import ROOT, fresh_database
from scale import FLOW, measured

from flow_cli.ops.doctor import diagnose
from flow_cli.store import open_store
from flow_cli.store.protocol import RunFilter, WorkerInfo

HOSTED = "bench-1"
UNHOSTED = "bench-0"


def rows(count: int, now: datetime) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """Run rows (run_id, workflow, status, build_id, created_at, updated_at, last_sequence,
    decide_at, lease_owner, failing, waiting_on, patches) and step task rows (run_id,
    step_id, build_id, attempt, available_at, lease_owner)."""
    runs: list[tuple[Any, ...]] = []
    tasks: list[tuple[Any, ...]] = []
    for n in range(count):
        run_id = f"order-{n:07d}"
        created = now - timedelta(hours=2, seconds=count - n)
        updated = created + timedelta(seconds=1)
        kind = n % 10
        build, decide_at, failing, waiting = HOSTED, None, None, "signal:go"
        status = "Suspended"
        if kind == 4:
            waiting = "hook:approval"
        elif kind == 5:
            waiting, decide_at = "timer:nap", now + timedelta(hours=1)
        elif kind == 6:
            waiting, decide_at = "timer:nap", now - timedelta(minutes=5)
        elif kind == 7:
            waiting, status = "step:charge", "Running"
            tasks.append((run_id, "charge", HOSTED, 2, now + timedelta(seconds=20), None))
        elif kind == 8:
            failing, decide_at = "ValueError: the order book is missing", now + timedelta(minutes=1)
        elif kind == 9:
            build = UNHOSTED
        runs.append(
            (run_id, "order", status, build, created, updated, 3, decide_at, None, failing,
             waiting, "[]")
        )  # fmt: skip
    return runs, tasks


RUN_COLUMNS = (
    "run_id, workflow, status, build_id, created_at, updated_at, last_sequence, decide_at, "
    "lease_owner, failing, waiting_on, patches"
)
TASK_COLUMNS = "run_id, step_id, build_id, attempt, available_at, lease_owner"


def load_sqlite(path: str, runs: list[tuple[Any, ...]], tasks: list[tuple[Any, ...]]) -> None:
    def text(value: Any) -> Any:
        return value.isoformat(timespec="microseconds") if isinstance(value, datetime) else value

    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(
        f"INSERT INTO runs ({RUN_COLUMNS}) VALUES ({', '.join('?' * 12)})",
        ([text(v) for v in row] for row in runs),
    )
    conn.executemany(
        f"INSERT INTO step_tasks ({TASK_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)",
        ([text(v) for v in row] for row in tasks),
    )
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.close()


def load_postgres(
    url: str, schema: str, runs: list[tuple[Any, ...]], tasks: list[tuple[Any, ...]]
) -> None:
    import psycopg

    base = url.split("?schema=")[0].split("&schema=")[0]
    with psycopg.connect(base) as conn:
        conn.execute(f'SET search_path TO "{schema}"')
        with conn.cursor() as cur:
            with cur.copy(f"COPY runs ({RUN_COLUMNS}) FROM STDIN") as copy:
                for row in runs:
                    copy.write_row(row)
            with cur.copy(f"COPY step_tasks ({TASK_COLUMNS}) FROM STDIN") as copy:
                for row in tasks:
                    copy.write_row(row)
        conn.execute("ANALYZE runs")
        conn.execute("ANALYZE step_tasks")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--db", default=None, help="a postgresql:// URL (default: SQLite)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline", default=None, help="another checkout's flow executable")
    args = parser.parse_args()
    backend = "postgres" if args.db else "sqlite"
    with fresh_database(backend, args.db or "") as (url, scratch):
        store = open_store(url)  # creates the schema
        now = datetime.now(UTC)
        started = time.perf_counter()
        runs, tasks = rows(args.runs, now)
        if backend == "sqlite":
            load_sqlite(url.removeprefix("sqlite:///"), runs, tasks)
        else:
            load_postgres(url, url.rsplit("schema=", 1)[1], runs, tasks)
        loaded = time.perf_counter() - started
        store.register_worker(
            WorkerInfo(
                worker_id="bench-worker",
                host="bench",
                pid=os.getpid(),
                builds=(HOSTED,),
                started_at=now,
                heartbeat_at=now,
                heartbeat_seconds=3600.0,  # stays live for the whole benchmark
            )
        )
        print(f"{backend}: {args.runs:,} open runs written in {loaded:.1f} s")

        engine_times = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            report = diagnose(store, RunFilter(), datetime.now(UTC))
            engine_times.append(time.perf_counter() - started)
        summary = {cause: n for cause, n in report.summary.items() if n}
        print(f"  engine call diagnose():   best {min(engine_times):.2f} s  {summary}")
        store.close()

        env = dict(os.environ, PYTHONPATH=str(ROOT), FLOW_DB=url, NO_COLOR="1")
        env.pop("FLOW_CONFIG", None)
        for label, extra in (("flow doctor --json", ["--json"]), ("flow doctor (table)", [])):
            times = []
            for _ in range(args.repeat):
                started = time.perf_counter()
                done = subprocess.run(
                    [sys.executable, "-m", "flow_cli", "doctor", *extra],
                    env=env,
                    cwd=scratch,
                    capture_output=True,
                    check=False,
                )
                times.append(time.perf_counter() - started)
                if done.returncode not in (0, 1):
                    raise SystemExit(f"flow doctor failed: {done.stderr.decode()}")
            size = len(done.stdout)
            # Each flow imports its own checkout (PYTHONPATH would make both this one).
            own = {k: v for k, v in env.items() if k != "PYTHONPATH"}
            peaks = [("this", FLOW)] + ([("baseline", args.baseline)] if args.baseline else [])
            rss = ", ".join(
                f"{name} {measured(flow, ['doctor', *extra], own, scratch)[1] / 2**20:.0f} MB"
                for name, flow in peaks
            )
            print(
                f"  {label + ':':25} best {min(times):.2f} s  (exit {done.returncode}, "
                f"{size / 1e6:.1f} MB on stdout; peak RSS {rss})"
            )


if __name__ == "__main__":
    sys.stdout = io.TextIOWrapper(sys.stdout.buffer, line_buffering=True)
    os.chdir(Path(__file__).resolve().parent)
    main()
