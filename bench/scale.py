"""Cost as data grows: whole `flow` commands on databases of 10,000 to 1,000,000 runs.

    .venv/bin/python bench/scale.py [--runs 10000,100000] [--backend sqlite|postgres]
        [--pg URL] [--repeat 5] [--keep DIR] [--memory] [--baseline FLOW]

Each database is built through the engine's own API (starts from 16 threads, so they group
commit, then ``Engine.tick`` until idle) with a mix of states (``KINDS``): completed, failed,
waiting on a signal, sleeping for 30 days, retrying a step daily, and parents whose two children
completed. Then each command of ``COMMANDS`` runs as a whole process (start-up included), best
of ``--repeat``, and the database's bytes per run are printed (SQLite: the file after a
checkpoint; PostgreSQL: the schema's relations). SQLite databases are cached in ``--keep`` (a
temporary directory by default) by size, so a second invocation times without building.

``--memory`` also runs, once each, the commands of ``MEMORY`` that walk many runs (an export of
every run, plain ``flow doctor``, a bulk dry run) and prints each one's peak RSS (the child's
``ru_maxrss`` from ``wait4``) with its wall time. ``--baseline FLOW`` runs every command with
that ``flow`` executable too (another checkout's), interleaved with this one's, and prints both
and their ratio: ``flow doctor`` and ``flow export`` before and after a change, on the same
database and the same noise. ``--fleet`` registers a worker that hosts the runs' build and stays
live (a heartbeat interval of years) in the database before timing, so that ``flow doctor``
classifies the open runs as a running fleet would (without it every open run is
``build-unhosted``): use it with a ``--keep`` directory of its own, since the worker stays.
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from common import DEFAULT_PG  # noqa: E402

KINDS = (
    ["completes"] * 10
    + ["fails"] * 2
    + ["waits"] * 3
    + ["sleeps"] * 2
    + ["retries"]
    + ["parent"] * 2
)
"""One start in twenty of each kind (a parent adds two child runs)."""

COMMANDS: list[tuple[str, list[str]]] = [
    ("runs --status Failed --limit 50", ["runs", "--status", "Failed", "--limit", "50"]),
    ("runs --workflow item --limit 50", ["runs", "--workflow", "item", "--limit", "50"]),
    ("runs --since 1h --limit 50", ["runs", "--since", "1h", "--limit", "50"]),
    ("count --by status", ["count", "--by", "status"]),
    ("doctor --limit 100", ["doctor", "--limit", "100"]),
    ("doctor", ["doctor"]),
    ("show RUN", ["show", "scale-000007"]),
    ("history RUN", ["history", "scale-000007"]),
]


MEMORY: list[tuple[str, list[str]]] = [
    ("doctor", ["doctor"]),
    ("doctor --json", ["doctor", "--json"]),
    ("cancel --status Suspended --dry-run", ["cancel", "--status", "Suspended", "--dry-run"]),
    ("export --all -o DIR --yes", ["export", "--all", "-o", "{export}", "--yes"]),
]
"""Commands whose memory grew with the runs they walk (``{export}``: an empty directory)."""


def build(url: str, runs: int) -> None:
    """``runs`` starts of ``order`` (plus the children of the parents), decided until idle."""
    import scale_workflows

    from flow_cli.engine.engine import Engine
    from flow_cli.store import open_store

    engine = Engine(open_store(url), [scale_workflows.runtime])
    began = time.perf_counter()
    try:
        chunk = 5000
        with ThreadPoolExecutor(16) as pool:
            for first in range(0, runs, chunk):
                ids = range(first, min(runs, first + chunk))
                list(
                    pool.map(
                        lambda i: engine.start(
                            "order",
                            {"customer": f"c{i % 997}", "kind": KINDS[i % len(KINDS)]},
                            run_id=f"scale-{i:06d}",
                        ),
                        ids,
                    )
                )
                engine.tick(until_idle=True, batch=500)
                print(f"  built {min(runs, first + chunk):,} runs", file=sys.stderr, flush=True)
    finally:
        engine.close()
    print(f"  built in {time.perf_counter() - began:.0f} s", file=sys.stderr, flush=True)


def live_fleet(store: Any) -> None:
    """Register a worker hosting the runs' build, live for years (``--fleet``)."""
    from datetime import UTC, datetime

    import scale_workflows

    from flow_cli.store.protocol import WorkerInfo

    now = datetime.now(UTC)
    store.register_worker(
        WorkerInfo(
            worker_id="scale-bench-fleet",
            host="bench",
            pid=0,
            builds=(scale_workflows.runtime.build_id,),
            started_at=now,
            heartbeat_at=now,
            heartbeat_seconds=1e9,
        )
    )


def sqlite_bytes(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return path.stat().st_size


def postgres_bytes(url: str, schema: str) -> int:
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relkind IN ('r', 'm')",
            (schema,),
        ).fetchone()
    return int(row[0]) if row else 0


FLOW = str(Path(sys.executable).parent / "flow")


_LAUNCH = """
import os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.argv[1], sys.argv[1:])
_, status, usage = os.wait4(pid, 0)
sys.stderr.write(f"\\nmaxrss {usage.ru_maxrss}\\n")
sys.exit(os.waitstatus_to_exitcode(status))
"""
"""Runs the command from a small process: Linux counts the RSS of the process that forked it
(until exec) in a child's ``ru_maxrss``, so forking from this script, which may hold a database
build, would floor every figure at this script's own size."""


def measured(flow: str, args: list[str], env: dict[str, str], cwd: Path) -> tuple[float, int]:
    """Wall seconds and peak RSS (bytes) of one ``flow ARGS`` (exit 0, or 1 for doctor's
    findings and for a bulk verb's failed runs)."""
    began = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-S", "-c", _LAUNCH, flow, *args],
        env=env,
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=False,
    )
    taken = time.perf_counter() - began
    if done.returncode not in (0, 1):
        raise SystemExit(f"flow {' '.join(args)}: exit {done.returncode}: {done.stderr[-2000:]!r}")
    rss = int(done.stderr.decode().rsplit("maxrss ", 1)[1])
    return taken, rss * 1024  # Linux: kilobytes


def best_of(
    args: list[str], env: dict[str, str], cwd: Path, repeat: int, flow: str = FLOW
) -> float:
    """The shortest wall time of ``repeat`` runs of ``flow ARGS``."""
    return min(measured(flow, args, env, cwd)[0] for _ in range(repeat))


def memory(env: dict[str, str], keep: Path, baseline: str | None) -> None:
    """``MEMORY``'s commands once each (with ``baseline`` first when given): time and RSS."""
    import shutil

    flows = ([("baseline", baseline)] if baseline else []) + [("this", FLOW)]
    for name, args in MEMORY:
        cells = []
        for label, flow in flows:
            out = keep / "export-out"
            shutil.rmtree(out, ignore_errors=True)
            taken, rss = measured(flow, [a.replace("{export}", str(out)) for a in args], env, keep)
            cells.append(f"{label} {taken:.1f} s, {rss / 2**20:.0f} MB RSS")
        shutil.rmtree(keep / "export-out", ignore_errors=True)
        print(f"  flow {name}: " + "; ".join(cells), flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", default="10000,100000")
    parser.add_argument("--backend", default="sqlite", choices=["sqlite", "postgres"])
    parser.add_argument("--pg", default=DEFAULT_PG)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--keep", default=None, help="directory of cached SQLite databases")
    parser.add_argument("--memory", action="store_true", help="time and RSS of MEMORY too")
    parser.add_argument("--baseline", default=None, help="another checkout's flow executable")
    parser.add_argument("--fleet", action="store_true", help="a live worker hosts the runs")
    options = parser.parse_args()
    keep = Path(options.keep or Path(tempfile.gettempdir()) / "flow-scale")
    keep.mkdir(parents=True, exist_ok=True)
    (keep / "flow.toml").write_text(
        '[flow]\nruntimes = ["scale_workflows:runtime"]\n', encoding="utf-8"
    )
    # An installed Flow has its bytecode cached: don't time compiling it in every process.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPATH"] = str(HERE)
    rows: list[tuple[int, dict[str, float], float]] = []
    for runs in [int(n) for n in options.runs.split(",")]:
        schema = ""
        if options.backend == "sqlite":
            path = keep / f"scale-{runs}.db"
            url = f"sqlite:///{path}"
            if not path.exists():
                partial = keep / f"scale-{runs}.partial.db"
                for leftover in keep.glob(f"scale-{runs}.partial.db*"):
                    leftover.unlink()
                build(f"sqlite:///{partial}", runs)
                for suffix in ("-wal", "-shm"):
                    Path(f"{partial}{suffix}").unlink(missing_ok=True)
                partial.rename(path)
            from flow_cli.store import open_store

            opened = open_store(url)  # a database cached by an older Flow: upgraded once here
            if options.fleet:
                live_fleet(opened)
            opened.close()
        else:
            schema = f"flow_scale_{runs}"
            url = f"{options.pg}{'&' if '?' in options.pg else '?'}schema={schema}"
            import psycopg

            with psycopg.connect(options.pg, autocommit=True) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            build(url, runs)
            if options.fleet:
                from flow_cli.store import open_store

                opened = open_store(url)
                live_fleet(opened)
                opened.close()
        env["FLOW_DB"] = url
        if options.baseline:
            for name, args in COMMANDS:
                pairs = [
                    (
                        best_of(args, env, keep, 1, options.baseline),
                        best_of(args, env, keep, 1),
                    )
                    for _ in range(options.repeat)
                ]
                ratios = sorted(new / old for old, new in pairs)
                print(
                    f"  flow {name}: baseline {min(p[0] for p in pairs) * 1000:.0f} ms, "
                    f"this {min(p[1] for p in pairs) * 1000:.0f} ms (best of {options.repeat}); "
                    f"median this/baseline {ratios[len(ratios) // 2]:.2f} "
                    f"({ratios[0]:.2f}-{ratios[-1]:.2f})",
                    flush=True,
                )
        if options.memory:
            memory(env, keep, options.baseline)
        times = {name: best_of(args, env, keep, options.repeat) for name, args in COMMANDS}
        total = (
            sqlite_bytes(keep / f"scale-{runs}.db")
            if options.backend == "sqlite"
            else postgres_bytes(options.pg, schema)
        )
        all_runs = runs + runs * KINDS.count("parent") * 2 // len(KINDS)
        rows.append((runs, times, total / all_runs))
        print(
            f"{runs:>9,} starts: "
            + ", ".join(f"{name} {seconds * 1000:.0f} ms" for name, seconds in times.items())
            + f"; {total / all_runs / 1024:.2f} KB a run",
            flush=True,
        )
    names = [name for name, _ in COMMANDS]
    print()
    print("| command | " + " | ".join(f"{runs:,} starts" for runs, _, _ in rows) + " |")
    print("| --- |" + " ---: |" * len(rows))
    for name in names:
        cells = " | ".join(f"{times[name] * 1000:.0f} ms" for _, times, _ in rows)
        print(f"| `flow {name}` | {cells} |")
    print("| bytes a run | " + " | ".join(f"{b / 1024:.2f} KB" for _, _, b in rows) + " |")


if __name__ == "__main__":
    main()
