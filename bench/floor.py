"""W3's floor: the commits and wake-ups of a one-step run, without Flow.

A W3 run costs three commits in two processes: the starting process commits the run (and
wakes a worker), the worker commits the step's lease (``step_started``) and then its end with
the run's completion, and the starting process sees the end by polling the run's row. This does
the same with bare ``sqlite3`` and ``psycopg``, one transaction each of one insert and one row
write, with Flow's durability (SQLite: WAL, ``synchronous=FULL``, NORMAL for the lease, which
does not wait for the disk; PostgreSQL: its default ``synchronous_commit``) and Flow's wake-ups
(a Unix datagram doorbell; ``NOTIFY`` on commit). What W3 measures above this is Flow's own
cost; what this measures is the machine's.

    .venv/bin/python bench/workloads.py W3,W3floor      (the ratio is printed after them)

``FLOOR_WORKER_COMMITS=1`` drops the lease's commit (two commits on the path, not three): the
floor of a PostgreSQL run whose start hands its step to an idle worker (``postgres.handoffs``),
which takes no lease.
"""

from __future__ import annotations

import os
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

RUNS = 55
WARM_UP = 5


def gap(i: int) -> float:
    """W3's pause before run ``i`` (the worker goes idle between runs, as between requests)."""
    return 0.05 + (i % 10) / 100


def measure(url: str, scratch: Path) -> dict[str, float]:
    """The floor on ``url`` (sqlite:///... or postgresql://...): median and p90 ms."""
    commits = int(os.environ.get("FLOOR_WORKER_COMMITS", "2"))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parent))
    worker = subprocess.Popen(
        [sys.executable, "-m", "floor", "worker", url, str(scratch), str(commits)], env=env
    )
    try:
        start, done, close = _driver(url, scratch)
        time.sleep(1.0)  # the worker is listening before the first run
        lat = []
        for i in range(RUNS):
            time.sleep(gap(i))
            t0 = time.perf_counter()
            start(i)
            while not done(i):
                time.sleep(0.0005)
            lat.append(1000 * (time.perf_counter() - t0))
        close()
    finally:
        worker.kill()
        worker.wait()
    lat = sorted(lat[WARM_UP:])
    return {"median_ms": statistics.median(lat), "p90_ms": lat[int(0.9 * len(lat))]}


def _driver(
    url: str, scratch: Path
) -> tuple[Callable[[int], None], Callable[[int], bool], Callable[[], None]]:
    if url.startswith("sqlite:///"):
        db = _sqlite(url)
        _ddl(db.execute)
        poll = _sqlite(url)
        bell = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        address = str(scratch / "floor.sock")

        def start(i: int) -> None:
            db.execute("BEGIN IMMEDIATE")
            db.execute("INSERT INTO floor_runs VALUES (?, 'new')", (i,))
            db.execute("INSERT INTO floor_events VALUES (?, 0)", (i,))
            db.execute("COMMIT")
            bell.sendto(b"x", address)

        def done(i: int) -> bool:
            row = poll.execute("SELECT status FROM floor_runs WHERE rid = ?", (i,)).fetchone()
            return bool(row[0] == "done")

        def close() -> None:
            db.close()
            poll.close()
            bell.close()

        return start, done, close

    import psycopg

    conn = psycopg.connect(_pg(url), autocommit=True)
    _ddl(conn.execute)
    reader = psycopg.connect(_pg(url), autocommit=True)

    def start_pg(i: int) -> None:
        conn.execute(
            f"BEGIN; INSERT INTO floor_runs VALUES ({i}, 'new'); "
            f"INSERT INTO floor_events VALUES ({i}, 0); SELECT pg_notify('flow_floor', '{i}'); "
            "COMMIT"
        )

    def done_pg(i: int) -> bool:
        row = reader.execute("SELECT status FROM floor_runs WHERE rid = %s", (i,)).fetchone()
        return bool(row is not None and row[0] == "done")

    def close_pg() -> None:
        conn.execute("DROP TABLE floor_runs; DROP TABLE floor_events")
        conn.close()
        reader.close()

    return start_pg, done_pg, close_pg


def _worker(url: str, scratch: Path, commits: int) -> None:
    statuses = ["leased"] * (commits - 1) + ["done"]
    if url.startswith("sqlite:///"):
        db = _sqlite(url)
        bell = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        bell.bind(str(scratch / "floor.sock"))
        while True:
            bell.recv(16)
            (rid,) = db.execute(
                "SELECT rid FROM floor_runs WHERE status = 'new' ORDER BY rid LIMIT 1"
            ).fetchone()
            for k, status in enumerate(statuses, start=1):
                lease = status == "leased"
                if lease:
                    db.execute("PRAGMA synchronous = NORMAL")
                db.execute("BEGIN IMMEDIATE")
                db.execute("INSERT INTO floor_events VALUES (?, ?)", (rid, k))
                db.execute("UPDATE floor_runs SET status = ? WHERE rid = ?", (status, rid))
                db.execute("COMMIT")
                if lease:
                    db.execute("PRAGMA synchronous = FULL")
    import psycopg

    listener = psycopg.connect(_pg(url), autocommit=True)
    listener.execute("LISTEN flow_floor")
    conn = psycopg.connect(_pg(url), autocommit=True)
    while True:
        for note in listener.notifies(stop_after=1):
            rid = int(note.payload)
            for k, status in enumerate(statuses, start=1):
                conn.execute(
                    f"BEGIN; INSERT INTO floor_events VALUES ({rid}, {k}); "
                    f"UPDATE floor_runs SET status = '{status}' WHERE rid = {rid}; COMMIT"
                )


def _sqlite(url: str) -> sqlite3.Connection:
    db = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None, timeout=10)
    db.execute("PRAGMA journal_mode = WAL")
    db.execute("PRAGMA synchronous = FULL")
    return db


def _pg(url: str) -> str:
    """The server's URL without Flow's ``schema=`` parameter (the floor's tables are its own)."""
    base, _, query = url.partition("?")
    kept = [p for p in query.split("&") if p and not p.startswith("schema=")]
    return base + ("?" + "&".join(kept) if kept else "")


def _ddl(execute: Callable[..., Any]) -> None:
    execute("DROP TABLE IF EXISTS floor_runs")
    execute("DROP TABLE IF EXISTS floor_events")
    execute("CREATE TABLE floor_runs (rid INTEGER PRIMARY KEY, status TEXT)")
    execute("CREATE TABLE floor_events (rid INTEGER, k INTEGER)")


if __name__ == "__main__":
    if sys.argv[1:2] == ["worker"]:
        _worker(sys.argv[2], Path(sys.argv[3]), int(sys.argv[4]))
