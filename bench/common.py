"""Shared pieces of the benchmark scripts: fresh databases and real `flow worker` processes."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]

DEFAULT_PG = os.environ.get("FLOW_TEST_POSTGRES", "postgresql://postgres@127.0.0.1:5432/test")


@contextmanager
def fresh_database(backend: str, pg_url: str) -> Iterator[tuple[str, Path]]:
    """A new empty database URL and a scratch directory holding a flow.toml for it."""
    scratch = Path(tempfile.mkdtemp(prefix="flow-bench-"))
    if backend == "sqlite":
        url = f"sqlite:///{scratch / 'flow.db'}"
    else:
        sep = "&" if "?" in pg_url else "?"
        url = f"{pg_url}{sep}schema=bench_{uuid.uuid4().hex[:8]}"
    (scratch / "flow.toml").write_text(
        '[flow]\nruntimes = ["load_workflows:runtime"]\n', encoding="utf-8"
    )
    try:
        yield url, scratch
    finally:
        if backend == "postgres":
            from flow_cli.store import open_store

            store = open_store(url)
            drop = getattr(store, "drop_schema", None)
            if drop is not None:
                drop()
            store.close()
        shutil.rmtree(scratch, ignore_errors=True)


def spawn_worker(url: str, scratch: Path, concurrency: int = 2) -> subprocess.Popen[bytes]:
    """A real `flow worker` process."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(ROOT / "tests")])
    env["FLOW_CONFIG"] = str(scratch / "flow.toml")
    env["FLOW_DB"] = url
    flow = shutil.which("flow", path=str(Path(sys.executable).parent)) or "flow"
    return subprocess.Popen(
        [flow, "worker", "--concurrency", str(concurrency), "--lease-seconds", "15"],
        env=env,
        cwd=scratch,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop(workers: list[subprocess.Popen[bytes]]) -> None:
    for worker in workers:
        worker.terminate()
    for worker in workers:
        try:
            worker.wait(30)
        except subprocess.TimeoutExpired:
            worker.kill()


def worker_args() -> list[str]:
    """Extra `flow worker` options from $BENCH_WORKER_ARGS (e.g. "--concurrency 4")."""
    return os.environ.get("BENCH_WORKER_ARGS", "").split()


def bench_worker(url: str, scratch: Path) -> subprocess.Popen[bytes]:
    """A real `flow worker` over ``url`` hosting ``bench/bench_workflows.py``, started and idle
    (its banner read) before this returns."""
    here = Path(__file__).resolve().parent
    (scratch / "flow.toml").write_text(
        '[flow]\nruntimes = ["bench_workflows:runtime"]\nbuild_id = "bench-1"\n', encoding="utf-8"
    )
    env = dict(os.environ, PYTHONPATH=str(here), FLOW_CONFIG=str(scratch / "flow.toml"))
    env["FLOW_DB"] = url
    worker = subprocess.Popen(
        [str(Path(sys.executable).parent / "flow"), "worker", *worker_args()],
        env=env,
        cwd=scratch,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    if worker.stderr is not None:
        worker.stderr.readline()
        # Keep reading what it logs (into BENCH_WORKER_LOG, if set): a full pipe would stop it.
        threading.Thread(target=_drain, args=(worker.stderr,), daemon=True).start()
    return worker


def _drain(stream: IO[bytes]) -> None:
    log = os.environ.get("BENCH_WORKER_LOG")
    with open(log or os.devnull, "ab") as out:
        for line in stream:
            out.write(line)
