"""Prometheus metrics for a worker (``flow worker --metrics-port``), from its ``Observer`` calls.

Needs ``prometheus-client`` (``pip install 'flow-cli[metrics]'``); only this module imports it,
and only when metrics are asked for.

Every counter and histogram moves in memory as the engine tells its observer what it did: no
metric costs a database round trip. ``flow_open_runs{status}`` is the one metric that reads the
database: one ``count_runs`` query per rendering (at most one a second, however often it is
scraped: ``health.cached``), never per decision. It counts every open run in the database, not
only this worker's, so each worker of a fleet reports the same figures: aggregate it with
``max``, not ``sum``.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from flow_cli.engine import health
from flow_cli.engine.health import DEFAULT_HOST, Liveness, Readiness, health_app
from flow_cli.engine.observe import Observer, RunRef, StepRef
from flow_cli.errors import FlowError
from flow_cli.model.status import RunStatus
from flow_cli.store.protocol import RunFilter

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

    from flow_cli.store.protocol import EventStore

log = logging.getLogger("flow.metrics")

OPEN_STATUSES = tuple(s for s in RunStatus if not s.terminal)
STEP_OUTCOMES = ("completed", "retrying", "failed", "discarded")
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900)
LATENESS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class MetricsObserver(Observer):
    """Counts what the engine tells it into a registry of its own (``self.registry``)."""

    def __init__(self, store: EventStore | None = None) -> None:
        self.store = store
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.decisions_total = Counter(
            "flow_decisions", "Decisions made (a failed one is not counted here).", registry=r
        )
        self.decision_failures_total = Counter(
            "flow_decision_failures",
            "Decisions that failed (the workflow code raised or diverged from history).",
            registry=r,
        )
        self.steps_total = Counter(
            "flow_steps",
            "Step attempts run, by outcome: completed, retrying (failed, another attempt is "
            "due), failed (exhausted), discarded (the run ended or another worker took it).",
            ["outcome"],
            registry=r,
        )
        for outcome in STEP_OUTCOMES:
            self.steps_total.labels(outcome)  # every outcome is exported from the start, at 0
        self.step_duration = Histogram(
            "flow_step_duration_seconds",
            "How long step handlers ran.",
            buckets=DURATION_BUCKETS,
            registry=r,
        )
        self.timer_lateness = Histogram(
            "flow_timer_lateness_seconds",
            "How long after its deadline a due timer was recorded as fired.",
            buckets=LATENESS_BUCKETS,
            registry=r,
        )
        self.conflicts_total = Counter(
            "flow_event_conflicts",
            "Commits that met another writer's (EventConflict) and were decided again.",
            registry=r,
        )
        ProcessCollector(registry=r)  # the worker's CPU, memory and open files
        if store is not None:
            r.register(OpenRuns(store))

    def decisions(self, made: int, failed: int) -> None:
        if made:
            self.decisions_total.inc(made)
        if failed:
            self.decision_failures_total.inc(failed)

    def conflict(self) -> None:
        self.conflicts_total.inc()

    def step_finished(self, step: StepRef, outcome: str, seconds: float) -> None:
        self.steps_total.labels(outcome).inc()
        self.step_duration.observe(seconds)

    def timer_fired(self, run: RunRef, wait_id: str, lateness: float) -> None:
        self.timer_lateness.observe(lateness)


class OpenRuns(Collector):
    """``flow_open_runs{status}``: one ``count_runs`` query per scrape."""

    def __init__(self, store: EventStore) -> None:
        self.store = store

    def describe(self) -> Iterator[Metric]:
        yield GaugeMetricFamily("flow_open_runs", "Open runs in the database, by status.")

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "flow_open_runs",
            "Open runs in the database, by status (all workers report the same: use max).",
            labels=["status"],
        )
        try:
            counts = self.store.count_runs(RunFilter(statuses=OPEN_STATUSES), by="status")
        except FlowError as error:  # the database is away: this scrape goes without the gauge
            log.debug("flow_open_runs: %s", error)
            return
        for status in OPEN_STATUSES:
            family.add_metric([status.value], counts.groups.get(status.value, 0))
        yield family


def serve(
    observer: MetricsObserver,
    port: int,
    host: str = DEFAULT_HOST,
    *,
    liveness: Liveness | None = None,
    readiness: Readiness | None = None,
) -> WSGIServer:
    """Serve ``observer``'s registry on ``http://HOST:PORT/metrics`` from a daemon thread, with
    ``/healthz`` and ``/readyz`` beside it and a 404 for any other path (``health``).

    Returns the server (``shutdown()`` stops it). Raises ``OSError`` when the port is taken.
    """
    from prometheus_client import make_wsgi_app

    if readiness is None:
        readiness = Readiness.of_store(observer.store) if observer.store is not None else None
    app = health_app(
        health.cached(make_wsgi_app(observer.registry)),
        liveness or Liveness(),
        readiness or Readiness(lambda: None),
    )
    return health.serve(app, host, port)
