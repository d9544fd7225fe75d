"""A worker's metrics port (issue 25, item 10): it listens on 127.0.0.1 unless
``--metrics-host`` says otherwise, serves ``/metrics``, ``/healthz`` (the loop made progress
lately) and ``/readyz`` (the database answers), and 404 for every other path."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import CONFIG, FlowProject

from flow_cli import Runtime, WorkflowContext
from flow_cli.engine.engine import Engine
from flow_cli.engine.health import Liveness, Readiness, health_app, serve
from flow_cli.engine.worker import Worker
from flow_cli.errors import StoreUnreachable
from flow_cli.model.commands import RuntimeCommand
from flow_cli.store.memory import MemoryStore

pytest.importorskip("prometheus_client")


def get(url: str) -> tuple[int, str]:
    """Status and body of a GET (an HTTP error status is an answer, not an exception)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode("utf-8")
    except urllib.error.HTTPError as error:
        with error:
            return error.code, error.read().decode("utf-8")


def wait_for(condition: Callable[[], Any], what: str, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def listening_addresses(port: int) -> set[str]:
    """The local IPv4 addresses a socket LISTENs on at ``port`` (read from /proc/net/tcp)."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, _, port_hex = local.partition(":")
        if state == "0A" and int(port_hex, 16) == port:
            found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


# -- the parts, in-process ----------------------------------------------------------------------


def test_liveness_is_lost_only_after_the_stall_time_outside_an_announced_wait() -> None:
    now = [100.0]
    live = Liveness(stall_seconds=5, clock=lambda: now[0])
    now[0] += 4.9
    assert live.alive()
    now[0] += 0.2
    assert not live.alive() and live.silent_for() == pytest.approx(0.1)
    live.beat(waiting=10)  # an outage back-off, or an idle wait: not a stall
    now[0] += 14.9
    assert live.alive()
    now[0] += 0.2
    assert not live.alive()


def test_readiness_probes_at_most_once_a_second_and_says_why() -> None:
    now = [0.0]
    calls: list[float] = []
    failing = [False]

    def probe() -> None:
        calls.append(now[0])
        if failing[0]:
            raise StoreUnreachable("PostgreSQL at db:5432/flow is unreachable (refused)")

    ready = Readiness(probe, cache_seconds=1.0, clock=lambda: now[0])
    assert ready.check() == (True, "ok")
    failing[0] = True
    assert ready.check() == (True, "ok") and len(calls) == 1  # the cached answer
    now[0] = 1.5
    assert ready.check() == (
        False,
        "database unreachable: PostgreSQL at db:5432/flow is unreachable (refused)",
    )
    assert len(calls) == 2


@pytest.fixture
def stub_server() -> Iterator[tuple[str, Liveness, list[bool]]]:
    """An in-process server over a stub store whose reachability can be switched off."""
    liveness = Liveness(stall_seconds=0.3)
    reachable = [True]

    def probe() -> None:
        if not reachable[0]:
            raise StoreUnreachable("PostgreSQL at 127.0.0.1:5432/test is unreachable (down)")

    def metrics(environ: dict[str, Any], start_response: Callable[..., Any]) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"flow_decisions_total 0.0\n"]

    app = health_app(metrics, liveness, Readiness(probe, cache_seconds=0))
    server = serve(app, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", liveness, reachable
    finally:
        server.shutdown()
        server.server_close()


def test_only_the_three_paths_are_served(stub_server: tuple[str, Liveness, list[bool]]) -> None:
    base, liveness, _ = stub_server
    liveness.beat()
    assert get(f"{base}/metrics") == (200, "flow_decisions_total 0.0\n")
    assert get(f"{base}/healthz") == (200, "ok\n")
    assert get(f"{base}/readyz") == (200, "ok\n")
    for path in ("/", "/metrics/", "/favicon.ico", "/healthz/x", "/../etc/passwd"):
        assert get(f"{base}{path}")[0] == 404, path
    request = urllib.request.Request(f"{base}/healthz", method="POST", data=b"")
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    refused.value.close()
    assert refused.value.code == 405


def test_readyz_is_503_while_the_store_is_unreachable(
    stub_server: tuple[str, Liveness, list[bool]],
) -> None:
    base, _, reachable = stub_server
    assert get(f"{base}/readyz") == (200, "ok\n")
    reachable[0] = False
    assert get(f"{base}/readyz") == (
        503,
        "database unreachable: PostgreSQL at 127.0.0.1:5432/test is unreachable (down)\n",
    )
    reachable[0] = True
    assert get(f"{base}/readyz") == (200, "ok\n")


runtime = Runtime(build_id="health-1")


@runtime.workflow("idle")
def idle(ctx: WorkflowContext) -> RuntimeCommand:
    return ctx.complete(None)


def test_healthz_is_503_while_the_worker_loop_is_stalled(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real ``Worker`` loop, stuck in a store call that does not return, then released."""
    engine = Engine(MemoryStore(), [runtime], worker_id="health")
    runner = Worker(engine, max_idle_sleep=0.05)
    runner.liveness.stall_seconds = 0.5
    stuck, release = threading.Event(), threading.Event()
    real_lease_runs = engine.work.lease_runs

    def lease_runs(*args: Any, **kwargs: Any) -> list[str]:
        if stuck.is_set():
            release.wait(30)  # a hung query
        return real_lease_runs(*args, **kwargs)

    monkeypatch.setattr(engine.work, "lease_runs", lease_runs)
    server = serve(health_app(None, runner.liveness, Readiness(lambda: None)), "127.0.0.1", 0)
    base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=runner.run)
    thread.start()
    try:
        wait_for(lambda: get(f"{base}/healthz") == (200, "ok\n"), "a healthy loop")
        stuck.set()
        _, body = wait_for(
            lambda: (answer := get(f"{base}/healthz"))[0] == 503 and answer, "a stalled loop"
        )
        assert body.startswith("stalled: the worker loop has not made progress for ")
        stuck.clear()
        release.set()
        wait_for(lambda: get(f"{base}/healthz") == (200, "ok\n"), "the loop to recover")
        assert get(f"{base}/metrics")[0] == 404  # no metrics app given: not served
    finally:
        stuck.clear()
        release.set()
        runner.stop()
        thread.join(30)
        server.shutdown()
        server.server_close()


# -- a real `flow worker` -------------------------------------------------------------------------


def start_worker(project: FlowProject, *args: str, db: str | None = None) -> subprocess.Popen[str]:
    log = (project.root / "worker.log").open("w", encoding="utf-8")
    where = ["--db", db] if db is not None else []
    with log:
        return subprocess.Popen(
            [sys.executable, "-m", "flow_cli", *where, "worker", *args],
            cwd=project.root,
            env=project.env,
            stdout=subprocess.DEVNULL,
            stderr=log,
            text=True,
        )


def stop(worker: subprocess.Popen[str]) -> int:
    if worker.poll() is None:
        worker.send_signal(signal.SIGTERM)
    return worker.wait(timeout=30)


@pytest.mark.skipif(not os.path.exists("/proc/net/tcp"), reason="reads Linux's /proc/net/tcp")
@pytest.mark.parametrize(
    ("args", "address"), [((), "127.0.0.1"), (("--metrics-host", "0.0.0.0"), "0.0.0.0")]
)
def test_a_real_worker_listens_on_127_0_0_1_by_default(
    tmp_path: Path, args: tuple[str, ...], address: str
) -> None:
    project = FlowProject(tmp_path, CONFIG)
    project.setup("start", "two-step", "--id", "r", "--input", '{"n": 1}')
    port = free_port()
    worker = start_worker(project, "--metrics-port", str(port), *args)
    try:
        base = f"http://127.0.0.1:{port}"
        wait_for(lambda: listening_addresses(port), "the metrics port")
        assert listening_addresses(port) == {address}
        status, body = get(f"{base}/metrics")
        assert status == 200 and "flow_decisions_total" in body
        assert get(f"{base}/healthz") == (200, "ok\n")
        assert get(f"{base}/readyz") == (200, "ok\n")
        assert get(f"{base}/anything")[0] == 404
    finally:
        assert stop(worker) == 0
    banner = (project.root / "worker.log").read_text().splitlines()[0]
    assert f"metrics on http://{address}:{port}/metrics" in banner


class CuttableProxy:
    """A TCP proxy to PostgreSQL whose line can be cut (every connection dropped, new ones
    closed at once) and restored: the server becomes unreachable without stopping it."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        self.cut = False
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return  # closed
            if self.cut:
                client.close()
                continue
            try:
                server = socket.create_connection(self.target, timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            with self._lock:
                self._open += [client, server]
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def drop_all(self) -> None:
        self.cut = True
        with self._lock:
            for s in self._open:
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            self._open.clear()

    def close(self) -> None:
        self.drop_all()
        self.listener.close()


@pytest.mark.postgres
def test_readyz_of_a_real_postgres_worker_follows_the_server(tmp_path: Path) -> None:
    base = os.environ.get("FLOW_TEST_POSTGRES")
    if not base:
        pytest.skip("set FLOW_TEST_POSTGRES=postgresql://... to run the PostgreSQL tests")
    import uuid
    from urllib.parse import urlsplit

    from flow_cli.store.postgres import PostgresStore

    parts = urlsplit(base)
    proxy = CuttableProxy((parts.hostname or "127.0.0.1", parts.port or 5432))
    schema = f"flow_health_{uuid.uuid4().hex[:12]}"
    sep = "&" if "?" in base else "?"
    direct = f"{base}{sep}schema={schema}"
    netloc = parts.netloc.replace(f":{parts.port or 5432}", f":{proxy.port}")
    proxied = f"{parts._replace(netloc=netloc).geturl()}{sep}schema={schema}"
    project = FlowProject(tmp_path, CONFIG)
    project.setup("--db", direct, "start", "approval", "--id", "waiting")
    port = free_port()
    worker = start_worker(project, "--metrics-port", str(port), db=proxied)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _answer(f"{url}/readyz") == (200, "ok\n"), "a ready worker")
        proxy.drop_all()
        _, body = wait_for(
            lambda: (answer := _answer(f"{url}/readyz"))[0] == 503 and answer,
            "the worker to see the database gone",
        )
        assert body.startswith("database unreachable: PostgreSQL at 127.0.0.1:")
        assert _answer(f"{url}/healthz") == (200, "ok\n")  # its loop backs off; it is alive
        proxy.cut = False
        wait_for(lambda: _answer(f"{url}/readyz") == (200, "ok\n"), "the database back")
    finally:
        code = stop(worker)
        proxy.close()
        store = PostgresStore(base, schema=schema)
        store.drop_schema()
        store.close()
    assert code == 0


def _answer(url: str) -> tuple[int, str]:
    try:
        return get(url)
    except OSError:  # the worker not listening yet
        return (0, "")


def test_a_flood_of_scrapes_renders_the_metrics_once_a_second() -> None:
    """100 scrapes a second must not cost the worker 100 renderings (and queries) a second."""
    from flow_cli.engine.health import cached

    rendered: list[str] = []

    def exposition(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        rendered.append(environ.get("QUERY_STRING", ""))
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [f"flow_open_runs {len(rendered)}\n".encode()]

    app = cached(exposition, seconds=60.0)
    statuses: list[str] = []
    bodies = [
        b"".join(app({"REQUEST_METHOD": "GET"}, lambda s, h: statuses.append(s)))
        for _ in range(100)
    ]
    answers = list(zip(statuses, bodies, strict=True))
    assert rendered == [""]
    assert set(answers) == {("200 OK", b"flow_open_runs 1\n")}
    b"".join(app({"REQUEST_METHOD": "GET", "QUERY_STRING": "name[]=x"}, lambda s, h: None))
    assert rendered == ["", "name[]=x"]  # another question is rendered for itself
    fresh = cached(exposition, seconds=0.0)
    b"".join(fresh({"REQUEST_METHOD": "GET"}, lambda s, h: None))
    b"".join(fresh({"REQUEST_METHOD": "GET"}, lambda s, h: None))
    assert len(rendered) == 4


def test_a_workers_metrics_port_counts_open_runs_once_however_often_scraped() -> None:
    """Through ``metrics.serve``, as ``flow worker --metrics-port`` serves it: 20 scrapes in a
    row ask the database for the open runs once (each asking cost the worker's steps CPU)."""
    from flow_cli.engine.metrics import MetricsObserver
    from flow_cli.engine.metrics import serve as serve_metrics
    from flow_cli.store.protocol import RunCount

    asked: list[str | None] = []

    class CountingStore:
        def count_runs(self, where: Any, by: str | None = None) -> RunCount:
            asked.append(by)
            return RunCount(total=2, groups={"Running": 2})

        def get_run(self, run_id: str) -> None:
            return None

    server = serve_metrics(MetricsObserver(CountingStore()), 0, "127.0.0.1")  # type: ignore[arg-type]
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        texts = [get(f"{base}/metrics")[1] for _ in range(20)]
    finally:
        server.shutdown()
        server.server_close()
    assert asked == ["status"]
    assert all('flow_open_runs{status="Running"} 2.0' in text for text in texts)
