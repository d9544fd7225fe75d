"""A worker process for crash tests: ``python tests/worker_process.py DB RUNTIME... [--opts]``.

It runs the same ``Worker`` loop as ``flow worker`` and exits 0 on SIGTERM, so tests can also
kill it with SIGKILL in the middle of a step attempt.
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from flow_cli.engine.engine import Engine
from flow_cli.engine.worker import Worker


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("db")
    parser.add_argument("runtimes", nargs="+")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--lease-seconds", type=float, default=2.0)
    parser.add_argument("--ready-file")
    parser.add_argument("--schema", help="PostgreSQL schema (tests isolate themselves)")
    args = parser.parse_args()
    # A hung worker in a test can be asked where it is: kill -USR1 PID prints every thread's stack.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    runtimes = []
    for ref in args.runtimes:
        module, _, attr = ref.partition(":")
        runtimes.append(getattr(importlib.import_module(module), attr))
    if args.schema:
        from flow_cli.store.postgres import PostgresStore

        engine = Engine(PostgresStore(args.db, schema=args.schema), runtimes)
    else:
        engine = Engine.open(args.db, runtimes)
    worker = Worker(
        engine,
        concurrency=args.concurrency,
        lease_seconds=args.lease_seconds,
        max_idle_sleep=0.2,
        on_store_error=lambda exc: print(f"flow worker: {exc}", file=sys.stderr, flush=True),
    )
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    signal.signal(signal.SIGINT, lambda *_: worker.stop())
    if args.ready_file:
        Path(args.ready_file).write_text("ready")
    worker.run()
    engine.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
