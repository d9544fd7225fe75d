"""`flow top` over 1,000,000 runs (SQLite): first screen and the database time of a refresh.

    .venv/bin/python bench/top.py [--runs 1000000] [--refreshes 20]

The runs are written straight into the runs index (``executemany``, as ``bench/doctor.py``
does; ``flow top`` reads nothing else until a run is opened): 90 % Completed, 5 % Failed with
an error type, 2 % Suspended waiting on a signal, 2 % Running, 1 % Pending with a failing
decision. Figures: the time from starting the app (headless, Textual's pilot) to its first
screen drawn with the header and the first page of the table, and the database time of one
refresh (``TopApp.refresh_view``: counts by status, the doctor over at most 500 open runs,
the workers, one page of the table), for the unfiltered view and for ``--status Failed``.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import os
import sqlite3
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from common import fresh_database

from flow_cli.engine.engine import Engine
from flow_cli.store import open_store

COLUMNS = (
    "run_id, workflow, status, build_id, created_at, updated_at, last_sequence, decide_at, "
    "lease_owner, failing, waiting_on, patches, error_type, error"
)


def rows(count: int, now: datetime) -> Any:
    def text(value: datetime) -> str:
        return value.isoformat(timespec="microseconds")

    for n in range(count):
        created = now - timedelta(seconds=count - n)
        kind = n % 100
        status, decide_at, failing, waiting, error_type, error = (
            "Completed", None, None, None, None, None
        )  # fmt: skip
        if kind < 5:
            status, error_type, error = "Failed", "ShippingFailed", "ShippingFailed: no carrier"
        elif kind < 7:
            status, waiting = "Suspended", "signal:shipped"
        elif kind < 9:
            status, waiting = "Running", "step:charge"
        elif kind == 9:
            status, failing = "Pending", "KeyError: 'sku'"
            decide_at, error_type, error = text(now + timedelta(minutes=1)), "KeyError", failing
        yield (
            f"order-{n:07d}", "order", status, "bench-1", text(created),
            text(created + timedelta(seconds=1)), 3, decide_at, None, failing, waiting, "[]",
            error_type, error,
        )  # fmt: skip


def load(path: str, count: int, now: datetime) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(
        f"INSERT INTO runs ({COLUMNS}) VALUES ({', '.join('?' * 14)})", rows(count, now)
    )
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    conn.close()


async def first_screen(engine: Engine) -> float:
    from flow_cli.cli.top import TopApp

    started = time.perf_counter()
    app = TopApp(engine, refresh_seconds=3600)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.pause()
        shown = time.perf_counter() - started
        assert app.header is not None and app.page, "the first screen is empty"
    return shown


def refreshes(engine: Engine, count: int, where: str) -> list[float]:
    from flow_cli.cli.top import PAGE_ROWS, StatusCounter, parse_filter_bar, read_header

    found = parse_filter_bar(where)
    counter = StatusCounter()
    times = []
    for _ in range(count):
        started = time.perf_counter()
        read_header(engine, datetime.now(UTC), counter)
        engine.find_runs(found.__class__(**{**_fields(found), "limit": PAGE_ROWS}))
        times.append(time.perf_counter() - started)
    return times


def _fields(value: Any) -> dict[str, Any]:
    return {name: getattr(value, name) for name in value.__dataclass_fields__}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=1_000_000)
    parser.add_argument("--refreshes", type=int, default=20)
    args = parser.parse_args()
    with fresh_database("sqlite", "") as (url, _scratch):
        open_store(url).close()  # creates the schema
        started = time.perf_counter()
        load(url.removeprefix("sqlite:///"), args.runs, datetime.now(UTC))
        print(f"sqlite: {args.runs:,} runs written in {time.perf_counter() - started:.1f} s")
        engine = Engine(open_store(url, create=False), [])
        with engine:
            shown = asyncio.run(first_screen(engine))
            print(f"  first screen (app start to header and first page drawn): {shown:.2f} s")
            for label, where in (("all runs", ""), ("--status Failed", "--status Failed")):
                times = refreshes(engine, args.refreshes, where)
                print(
                    f"  refresh, database time, {label:16} median "
                    f"{statistics.median(times) * 1000:.0f} ms, max {max(times) * 1000:.0f} ms"
                )


if __name__ == "__main__":
    sys.stdout = io.TextIOWrapper(sys.stdout.buffer, line_buffering=True)
    os.chdir(Path(__file__).resolve().parent)
    main()
