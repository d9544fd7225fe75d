"""Bytes a SQLite worker writes to disk per step: W2's run of --steps sequential steps.

    .venv/bin/python bench/step_bytes.py [--steps 2000] [--runs 1] [--repeat 3]
        [--baseline /path/to/other/checkout/.venv/bin/python]

Starts one `flow worker` on a fresh SQLite file, starts --runs runs of ``chain`` with --steps
steps each (W2 of bench/workloads.py by default; ``--runs 1000 --steps 10`` is W1's shape,
runs whose events interleave), waits for them, and reads the worker's ``write_bytes`` and
``wchar`` from /proc/PID/io before and after: bytes it sent to the disk (WAL frames,
checkpoints into the database file) per step, with the runs' event JSON and the worker's CPU
per step beside them. With --baseline, each measurement is also taken with that interpreter
(another build of Flow), interleaved.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent


def _io(pid: int) -> dict[str, int]:
    text = Path(f"/proc/{pid}/io").read_text(encoding="ascii")
    return {k: int(v) for k, v in (line.split(": ") for line in text.splitlines())}


def _cpu(pid: int) -> float:
    """The process's user + system CPU seconds (all its threads)."""
    fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(steps: int, runs: int) -> dict[str, float]:
    """One measurement in this interpreter (its installed Flow)."""
    sys.path[:0] = [str(HERE)]
    import bench_workflows
    from common import fresh_database
    from workloads import _wait, _worker

    from flow_cli.engine.engine import Engine
    from flow_cli.store import open_store

    with fresh_database("sqlite", "") as (url, scratch):
        engine = Engine(open_store(url), [bench_workflows.runtime])
        worker = _worker(url, scratch)
        try:
            before, cpu = _io(worker.pid), _cpu(worker.pid)
            began = time.perf_counter()
            ids = [f"w2-{uuid.uuid4().hex[:12]}" for _ in range(runs)]
            for run_id in ids:
                engine.start("chain", {"steps": steps, "x": 0}, run_id=run_id)
            assert _wait(engine, ids, 900, 0.01), "the runs did not end"
            wall = time.perf_counter() - began
            time.sleep(0.5)  # a checkpoint the worker does at idle counts too
            after, cpu = _io(worker.pid), _cpu(worker.pid) - cpu
            json_bytes = sum(e.size or 0 for r in ids for e in engine.history(r))
        finally:
            worker.terminate()
            worker.wait()
            engine.close()
    total = steps * runs
    return {
        "write_bytes_per_step": (after["write_bytes"] - before["write_bytes"]) / total,
        "wchar_per_step": (after["wchar"] - before["wchar"]) / total,
        "json_per_step": json_bytes / total,
        "ms_per_step": 1000 * wall / total,
        "worker_cpu_ms_per_step": 1000 * cpu / total,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--baseline", default=None)
    parser.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(measure(args.steps, args.runs)))
        return
    pythons = {"this": sys.executable}
    if args.baseline:
        pythons["baseline"] = args.baseline
    found: dict[str, list[dict[str, float]]] = {name: [] for name in pythons}
    for _ in range(args.repeat):
        for name, python in pythons.items():
            out = subprocess.run(
                [python, __file__, "--one", "--steps", str(args.steps), "--runs", str(args.runs)],
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            found[name].append(json.loads(out.strip().splitlines()[-1]))
            print(name, found[name][-1], flush=True)
    for name, rows in found.items():
        cells = ", ".join(
            f"{key} {statistics.median(r[key] for r in rows):,.2f}" for key in rows[0]
        )
        print(f"{name}: median of {len(rows)}: {cells}")


if __name__ == "__main__":
    main()
