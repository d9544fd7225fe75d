"""A project on the example shop for the fleet-health CLI tests, on SQLite or PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import FlowProject, Result

SHOP_CONFIG = """\
[flow]
database = "sqlite:///flow.db"
build_id = "shop-2026.12.1"
runtimes = [
    "workflows_example.orders:runtime",
    "workflows_example.orders_v1:runtime",
    "workflows_example.orders_broken:runtime",
]
"""


class FleetProject(FlowProject):
    """A ``FlowProject`` whose every command gets ``--db URL`` (SQLite file or a PG schema)."""

    def __init__(self, root: Path, url: str, config: str = SHOP_CONFIG) -> None:
        super().__init__(root, config)
        self.url = url
        self.env["FLOW_EXAMPLE_LEDGER"] = str(root / "ledger.jsonl")

    def flow(self, *args: str, env: dict[str, str] | None = None) -> Result:
        return self.run("--db", self.url, *args, env=env)

    def must(self, *args: str) -> Result:
        result = self.flow(*args)
        if result.code != 0:
            raise AssertionError(f"flow {' '.join(args)} exited {result.code}: {result.stderr}")
        return result

    def spawn_worker(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "flow_cli", "--db", self.url, "worker", *args],
            cwd=self.root,
            env={**self.env, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


def start_order(project: FleetProject, run_id: str, *extra: str, amount: float = 10.0) -> None:
    payload = f'{{"sku": "sku-1", "quantity": 1, "amount": {amount}}}'
    project.must("start", "order", "--id", run_id, "--input", payload, *extra)


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    """Poll until ``condition()`` is truthy (a deadline against hangs, not a timed assertion)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def stop(process: subprocess.Popen[str]) -> tuple[str, str]:
    """SIGTERM the process (if still running) and return its (stdout, stderr)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        return process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.communicate()


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def fleet(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[FleetProject]:
    """The example shop on SQLite, and on PostgreSQL (a schema of its own) when configured."""
    if request.param == "sqlite":
        yield FleetProject(tmp_path, f"sqlite:///{tmp_path / 'flow.db'}")
        return
    pg = os.environ.get("FLOW_TEST_POSTGRES")
    if not pg:
        pytest.skip("set FLOW_TEST_POSTGRES=postgresql://... to run the PostgreSQL CLI tests")
    schema = f"fleet_{uuid.uuid4().hex[:12]}"
    sep = "&" if "?" in pg else "?"
    yield FleetProject(tmp_path, f"{pg}{sep}schema={schema}")
    from flow_cli.store.postgres import PostgresStore

    store = PostgresStore(pg, schema=schema)
    try:
        store.drop_schema()
    finally:
        store.close()
