"""What a worker's metrics port answers besides ``/metrics``: ``/healthz`` and ``/readyz``.

- ``/healthz``: the worker loop is alive. The loop beats at every turn and before every wait it
  means to make (``Liveness.beat``); when it has neither beaten nor been in a wait it announced
  for ``STALL_SECONDS``, it is stuck (a hung query, a deadlock, a decision that never returns)
  and the answer is 503, so a supervisor or an orchestrator's liveness probe restarts it.
- ``/readyz``: the store is reachable. Each answer runs a cheap read (``Readiness``), at most
  once per ``PROBE_CACHE_SECONDS`` however often it is asked, so a scrape flood costs the
  database nothing; 503 with the store's own sentence (never a password) while it fails.
- ``/metrics``: Prometheus text, from the app the caller passes (prometheus-client is imported
  by ``flow_cli.engine.metrics`` only, and only when metrics are asked for).
- Any other path: 404. Only GET and HEAD are answered (405 otherwise).

The server listens on ``127.0.0.1`` unless told otherwise (``flow worker --metrics-host``): a
port on every interface is open to anyone on the network, which must be a choice, not a default.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from flow_cli.errors import FlowError

if TYPE_CHECKING:
    from flow_cli.store.protocol import EventStore

log = logging.getLogger("flow.health")

STALL_SECONDS = 5.0
"""How long the worker loop may go without a beat (outside a wait it announced) before
``/healthz`` calls it stuck."""

PROBE_CACHE_SECONDS = 1.0
"""How long one reachability probe answers ``/readyz`` for."""

DEFAULT_HOST = "127.0.0.1"
"""Where the metrics port listens unless ``--metrics-host`` says otherwise."""

PROBE_RUN_ID = "flow-readyz-probe"
"""The run id ``/readyz`` looks up: a primary-key read that finds nothing, the cheapest query
every store answers, and that fails exactly when the database cannot be reached."""

StartResponse = Callable[..., Any]
WsgiApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class Liveness:
    """The worker loop's heartbeat, read by ``/healthz`` from another thread."""

    def __init__(
        self, stall_seconds: float = STALL_SECONDS, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.stall_seconds = stall_seconds
        self._clock = clock
        self._deadline = clock() + stall_seconds

    def beat(self, waiting: float = 0.0) -> None:
        """The loop made progress; it is about to wait ``waiting`` seconds on purpose."""
        # One float store: atomic under the GIL, no lock needed on the loop's hot path.
        self._deadline = self._clock() + max(0.0, waiting) + self.stall_seconds

    def silent_for(self) -> float:
        """Seconds past the moment the loop should have beaten again (0 while alive)."""
        return max(0.0, self._clock() - self._deadline)

    def alive(self) -> bool:
        return self.silent_for() == 0.0


class Readiness:
    """Whether the store answers, probed at most once per ``cache_seconds``."""

    def __init__(
        self,
        probe: Callable[[], object],
        cache_seconds: float = PROBE_CACHE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._probe = probe
        self._cache_seconds = cache_seconds
        self._clock = clock
        self._lock = threading.Lock()
        self._checked: float | None = None
        self._answer: tuple[bool, str] = (False, "not probed yet")

    @classmethod
    def of_store(cls, store: EventStore) -> Readiness:
        return cls(lambda: store.get_run(PROBE_RUN_ID))

    def check(self) -> tuple[bool, str]:
        """``(True, "ok")`` or ``(False, why)``."""
        with self._lock:  # one probe at a time; concurrent askers share its answer
            now = self._clock()
            if self._checked is not None and now - self._checked < self._cache_seconds:
                return self._answer
            try:
                self._probe()
            except FlowError as error:
                self._answer = (False, f"database unreachable: {error}")
            except Exception as error:  # a probe must answer, whatever the driver raised
                log.debug("readiness probe failed", exc_info=True)
                self._answer = (False, f"database unreachable: {type(error).__name__}")
            else:
                self._answer = (True, "ok")
            self._checked = self._clock()
            return self._answer


def health_app(metrics: WsgiApp | None, liveness: Liveness, readiness: Readiness) -> WsgiApp:
    """The WSGI app of a worker's metrics port (see the module docstring)."""

    def app(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        method = environ.get("REQUEST_METHOD", "GET")
        if path not in ("/metrics", "/healthz", "/readyz") or (
            path == "/metrics" and metrics is None
        ):
            return _plain(
                start_response,
                "404 Not Found",
                "not found: try /metrics, /healthz or /readyz\n",
                method,
            )
        if method not in ("GET", "HEAD"):
            return _plain(start_response, "405 Method Not Allowed", "GET or HEAD only\n", method)
        if path == "/metrics" and metrics is not None:
            return metrics(environ, start_response)
        if path == "/healthz":
            if liveness.alive():
                return _plain(start_response, "200 OK", "ok\n", method)
            silent = liveness.silent_for() + liveness.stall_seconds
            text = f"stalled: the worker loop has not made progress for {silent:.1f} s\n"
            return _plain(start_response, "503 Service Unavailable", text, method)
        ready, why = readiness.check()
        if ready:
            return _plain(start_response, "200 OK", "ok\n", method)
        return _plain(
            start_response, "503 Service Unavailable", " ".join(why.split()) + "\n", method
        )

    return app


METRICS_CACHE_SECONDS = 1.0
"""How long one rendering of ``/metrics`` answers every scrape: rendering costs the worker about
a millisecond of CPU (and ``flow_open_runs`` a query), taken from its steps; a second is below
any scrape interval Prometheus is configured with, so no reader sees older figures than that."""


def cached(app: WsgiApp, seconds: float = METRICS_CACHE_SECONDS) -> WsgiApp:
    """``app`` (Prometheus' exposition) with each answer kept ``seconds`` for the same request
    (path, query, accepted formats and encodings): a flood of scrapes renders once a second."""
    lock = threading.Lock()
    kept: dict[tuple[str, ...], tuple[float, str, list[tuple[str, str]], bytes]] = {}

    def serve_cached(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        key = tuple(
            str(environ.get(name, ""))
            for name in ("QUERY_STRING", "HTTP_ACCEPT", "HTTP_ACCEPT_ENCODING")
        )
        now = time.monotonic()
        with lock:  # one rendering at a time; the others wait for it and reuse it
            found = kept.get(key)
            if found is None or now - found[0] >= seconds:
                answer: list[tuple[str, list[tuple[str, str]]]] = []

                def keep(status: str, headers: list[tuple[str, str]], *_: Any) -> Any:
                    answer.append((status, list(headers)))
                    return lambda data: None

                body = b"".join(app(environ, keep))
                found = (time.monotonic(), answer[0][0], answer[0][1], body)
                if len(kept) > 16:  # a scraper varying its query: keep a bound
                    kept.clear()
                kept[key] = found
        _, status, headers, body = found
        start_response(status, headers)
        return [] if environ.get("REQUEST_METHOD") == "HEAD" else [body]

    return serve_cached


def _plain(start_response: StartResponse, status: str, text: str, method: str) -> list[bytes]:
    body = text.encode("utf-8", "replace")
    start_response(
        status,
        [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))],
    )
    return [] if method == "HEAD" else [body]


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    """A slow scraper never keeps the worker from exiting."""
    request_queue_size = 128
    """The listen backlog (socketserver's default is 5): a burst of scrapes waits, not refused."""


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Every scrape on stderr would drown the worker's own lines."""


def serve(app: WsgiApp, host: str, port: int) -> WSGIServer:
    """Serve ``app`` on ``host:port`` from a daemon thread; ``shutdown()`` stops it.

    Raises ``OSError`` when the address cannot be used (taken, unknown host).
    """
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]

    class Server(_ThreadingServer):
        address_family = family  # an IPv6 --metrics-host (::1, ::) needs an IPv6 socket

    server: WSGIServer = make_server(host, port, app, Server, _QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="flow-metrics", daemon=True)
    thread.start()
    return server
