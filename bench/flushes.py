"""How many times a SQLite worker flushes the disk per step, counted by strace.

    .venv/bin/python bench/flushes.py [--runs 20] [--steps 1]

Starts one `flow worker` on a fresh SQLite file (Flow's defaults: WAL, ``synchronous=FULL``),
attaches ``strace -c -f -e trace=fsync,fdatasync`` to it, then starts ``--runs`` runs of
``--steps`` sequential steps one after the other, each waited for, as in W3. Prints the
worker's flushes per run and per step. Each one is a commit that waited for the disk: the
step's end with the run's next decision (a step's lease does not wait, see docs/operations.md).
The starting process's own commits (one per run) are not counted.
"""

from __future__ import annotations

import argparse
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE)]

from common import bench_worker, fresh_database  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--steps", type=int, default=1)
    args = parser.parse_args()
    if shutil.which("strace") is None:
        parser.error("this needs the strace program")
    import bench_workflows

    from flow_cli.engine.engine import Engine
    from flow_cli.store import open_store

    with fresh_database("sqlite", "") as (url, scratch):
        # The engine first: were it to fail, no worker would be left running.
        engine = Engine(open_store(url), [bench_workflows.runtime])
        worker = bench_worker(url, scratch)
        tracer = subprocess.Popen(
            ["strace", "-c", "-f", "-e", "trace=fsync,fdatasync", "-p", str(worker.pid)],
            stderr=subprocess.PIPE,
            text=True,
        )
        time.sleep(1.0)  # attached to every thread
        try:
            for i in range(args.runs):
                run_id = f"flush-{i}"
                engine.start("chain", {"steps": args.steps, "x": i}, run_id=run_id)
                while engine.get_run(run_id).status.value != "Completed":
                    time.sleep(0.001)
                time.sleep(0.05)  # let the worker go idle, as between requests
        finally:
            tracer.send_signal(signal.SIGINT)
            report = tracer.communicate()[1]
            worker.terminate()
            worker.wait()
            engine.close()
    flushes = sum(
        int(m.group(1))
        for m in re.finditer(
            r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?f(?:data)?sync\s*$", report, re.M
        )
    )
    print(f"worker flushes: {flushes} for {args.runs} runs of {args.steps} step(s)")
    print(f"per run {flushes / args.runs:.2f}, per step {flushes / (args.runs * args.steps):.2f}")


if __name__ == "__main__":
    main()
