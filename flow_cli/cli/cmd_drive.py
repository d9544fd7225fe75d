"""Commands that drive runs forward: ``tick`` (one pass, or until idle) and ``worker``."""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any

import typer

from flow_cli.cli.io import emit_json, one_line, out
from flow_cli.cli.options import (
    MAX_CONCURRENCY,
    MAX_PROCESSES,
    JsonFlag,
    LeaseSeconds,
    LogFormat,
    LogFormatOption,
    LogLevel,
    LogLevelOption,
    text_option,
)
from flow_cli.cli.state import CliState
from flow_cli.cli.words import plural
from flow_cli.errors import FlowError, InputError, StoreError

if TYPE_CHECKING:
    import logging
    from wsgiref.simple_server import WSGIServer

    from flow_cli.engine.engine import Engine
    from flow_cli.engine.metrics import MetricsObserver
    from flow_cli.engine.observe import Observer
    from flow_cli.engine.retention import RetentionPolicy
    from flow_cli.engine.worker import TickReport, Worker, WorkerStats

METRICS_EXTRA = "pip install 'flow-cli[metrics]'"


def tick(
    ctx: typer.Context,
    until_idle: Annotated[
        bool,
        typer.Option(
            "--until-idle",
            help="Repeat passes until nothing is runnable now (future timers stay pending).",
        ),
    ] = False,
    lease_seconds: LeaseSeconds = 30.0,
    json_output: JsonFlag = False,
    log_format: LogFormatOption = LogFormat.TEXT,
    log_level: LogLevelOption = LogLevel.WARNING,
) -> None:
    """Run one scheduler pass, or passes until idle.

    A pass fires due timers and retries, decides runnable runs and runs ready steps; the first
    starts the runs of schedules that came due. Prints a
    one-line summary (or a JSON report with --json). With --until-idle on a terminal, progress
    is shown on stderr while it works. Failed decisions and step attempts are logged on stderr
    as `flow worker` logs them. A database that is locked or unreachable is waited for (one
    line on stderr, retried with a growing pause) until it answers or SIGINT/SIGTERM stops the
    wait (exit 1, nothing done).
    """
    from flow_cli.cli import logs
    from flow_cli.cli.otel import tracing_observer
    from flow_cli.engine.observe import LogObserver, Observers
    from flow_cli.engine.registry import Registration

    logs.install(log_format, log_level)
    state = CliState.of(ctx)
    tracer = tracing_observer()
    opened = _open_when_reachable(state, LogObserver(), "tick")
    if opened is None:
        raise StoreError("tick stopped while waiting for the database; nothing was done.")
    with opened as engine:
        engine.observe(LogObserver() if tracer is None else Observers([LogObserver(), tracer]))
        progress = _TickProgress() if until_idle and sys.stderr.isatty() else None
        with Registration(engine), progress or nullcontext():
            report = engine.tick(
                until_idle=until_idle,
                lease_seconds=lease_seconds,
                on_pass=progress.update if progress is not None else None,
            )
        next_due = engine.next_due()
    if tracer is not None:
        tracer.shutdown()
    if state.want_json(json_output):
        emit_json(
            {
                "passes": report.passes,
                "decisions": report.decisions,
                "runs_decided": report.runs_decided,
                "steps_run": report.steps_run,
                "conflicts": report.conflicts,
                "decision_failures": report.decision_failures,
                "schedules_fired": report.schedules_fired,
                "idle": report.idle,  # nothing was runnable: no run decided, no step run
                "next_due": next_due.isoformat() if next_due is not None else None,
            }
        )
        return
    passes = "pass" if report.passes == 1 else "passes"
    runs = "run" if report.runs_decided == 1 else "runs"
    steps = "step" if report.steps_run == 1 else "steps"
    line = (
        f"tick: {report.passes} {passes}, {report.runs_decided} {runs} decided, "
        f"{report.steps_run} {steps} run"
    )
    if report.decision_failures:
        line += f", {plural(report.decision_failures, 'decision failure')}"
    if report.schedules_fired:
        line += f", {plural(report.schedules_fired, 'scheduled run')} started"
    if next_due is not None:
        line += f"; next due {next_due.isoformat(timespec='seconds')}"
    out(line)


class _TickProgress(AbstractContextManager["_TickProgress"]):
    """A live status line on stderr: passes, runs decided, steps run."""

    def __init__(self) -> None:
        from rich.progress import Progress, SpinnerColumn, TextColumn

        from flow_cli.cli import render

        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            console=render.console(stderr=True),
            transient=True,
        )
        self._task = self._progress.add_task("tick: starting", total=None)

    def __enter__(self) -> _TickProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._progress.stop()

    def update(self, report: TickReport) -> None:
        from flow_cli.cli.render import tick_progress_text

        self._progress.update(self._task, description=tick_progress_text(report))


def worker(
    ctx: typer.Context,
    concurrency: Annotated[
        int,
        typer.Option(
            "--concurrency",
            metavar="N",
            min=1,
            max=MAX_CONCURRENCY,
            help=f"Step attempts run at once (at most {MAX_CONCURRENCY}).",
        ),
    ] = 32,  # Worker's DEFAULT_CONCURRENCY, not imported: the CLI starts without the engine
    processes: Annotated[
        int,
        typer.Option(
            "--processes",
            metavar="N",
            min=1,
            max=MAX_PROCESSES,
            help="Worker processes to run, each with its step threads (one per core uses them "
            "all; with --metrics-port P they serve P, P+1, ...).",
        ),
    ] = 1,
    lease_seconds: LeaseSeconds = 30.0,
    log_format: LogFormatOption = LogFormat.TEXT,
    log_level: LogLevelOption = LogLevel.INFO,
    metrics_port: Annotated[
        int | None,
        text_option(
            "--metrics-port",
            "PORT",
            "Serve Prometheus metrics on http://HOST:PORT/metrics, with /healthz (the "
            "worker loop made progress in the last 5 s) and /readyz (the database answers); "
            f"503 when not, 404 for other paths (needs {METRICS_EXTRA}).",
            min=1,
            max=65535,
        ),
    ] = None,
    metrics_host: Annotated[
        str,
        typer.Option(
            "--metrics-host",
            metavar="HOST",
            help="The address --metrics-port listens on: 127.0.0.1 keeps it on this machine; "
            "0.0.0.0 (or ::) opens it to every interface.",
        ),
    ] = "127.0.0.1",  # health.DEFAULT_HOST, not imported: the CLI starts without the engine
) -> None:
    """Run runs continuously until interrupted.

    Decides due runs, runs ready steps on N threads and sleeps until work arrives. SIGINT or
    SIGTERM stops it cleanly: attempts in hand finish, then it exits 0 (a second Ctrl-C aborts
    at once; the abandoned attempts are retried after their lease expires). Safe to run many
    at once, on many machines sharing one database. Quiet while healthy: stderr gets one line
    per notable event (a decision failed or recovered, a step attempt failed and when the next
    one is due, a step exhausted, a run failed, a lease lost, the database unavailable or
    back), as text or JSON (--log-format). A database that is locked or unreachable when the
    worker starts is waited for in the same way (SIGINT/SIGTERM while waiting: exit 0).
    """
    from flow_cli.cli import logs
    from flow_cli.cli.otel import tracing_observer
    from flow_cli.engine.observe import LogObserver, Observers
    from flow_cli.engine.registry import Registration
    from flow_cli.engine.worker import Worker

    if metrics_port is not None:
        _check_metrics_extra()
    tracer = tracing_observer()
    handler = logs.install(log_format, log_level)
    if processes > 1:
        from flow_cli.cli.worker_processes import supervise

        raise typer.Exit(
            supervise(processes, metrics_port, lambda text, event: logs.say(text, event, "error"))
        )
    state = CliState.of(ctx)
    server: WSGIServer | None = None
    log_observer = LogObserver()
    retention = _retention_policy(state)
    opened = _open_when_reachable(state, log_observer, "worker")
    if opened is None:
        logs.say("stopped before the database was reachable", "worker_stopped")
        return
    with opened as engine:
        observers: list[Observer] = [log_observer]
        metrics = _metrics_observer(engine) if metrics_port is not None else None
        if metrics is not None:
            observers.append(metrics)
        if tracer is not None:
            observers.append(tracer)
        engine.observe(Observers(observers))
        reporter = _OutageReporter(log_observer)
        runner = Worker(
            engine,
            concurrency=concurrency,
            lease_seconds=lease_seconds,
            on_store_error=reporter,
            retention=retention,
        )
        if metrics is not None and metrics_port is not None:
            server = _serve_metrics(metrics, metrics_host, metrics_port, runner)
        handler.addFilter(reporter.already_reported)
        logs.say(
            _banner(engine, concurrency, lease_seconds, metrics_port, metrics_host),
            "worker_started",
            worker_id=engine.worker_id,
            builds=engine.build_ids,
            concurrency=concurrency,
            lease_seconds=lease_seconds,
            metrics_port=metrics_port,
            metrics_host=metrics_host if metrics_port is not None else None,
        )
        previous = _install_stop_handlers(runner.stop)
        _watch_parent(runner)
        hook, threading.excepthook = threading.excepthook, _thread_crashed
        try:
            with Registration(engine):
                stats = runner.run()
        finally:
            threading.excepthook = hook
            handler.removeFilter(reporter.already_reported)
            for signum, old in previous.items():
                signal.signal(signum, old)
            if server is not None:
                server.shutdown()
                server.server_close()
            if tracer is not None:
                tracer.shutdown()
    logs.say(
        stopped_summary(stats),
        "worker_stopped",
        runs_decided=stats.runs_decided,
        steps_run=stats.steps_run,
        store_errors=stats.store_errors,
    )


def _open_when_reachable(state: CliState, observer: Observer, command: str) -> Engine | None:
    """The engine, once the database answers (``flow_cli.cli.db_wait``); ``None`` when
    SIGINT or SIGTERM came while waiting for it."""
    from flow_cli.cli import logs
    from flow_cli.cli.db_wait import open_when_reachable

    def stopping(name: str) -> None:
        logs.say(f"{name}: stopping ({command} was waiting for the database)", "worker_stopping")

    return open_when_reachable(
        lambda: state.open_engine(create=True, with_runtimes=True), observer, stopping
    )


def _retention_policy(state: CliState) -> RetentionPolicy | None:
    """``[flow] retention`` (and ``retention_archive``) as the worker's policy, or ``None``."""
    config = state.config
    if config.retention is None:
        return None
    from flow_cli.engine.archive import check_writable
    from flow_cli.engine.retention import RetentionPolicy

    if config.retention_archive is not None:
        # Said at start, not at the first prune, maybe days later.
        check_writable(config.retention_archive, f"{config.label}: [flow] retention_archive")
    return RetentionPolicy(keep=config.retention, archive=config.retention_archive)


def _check_metrics_extra() -> None:
    """``--metrics-port`` without prometheus-client installed is a usage error (exit 2)."""
    import importlib.util

    if importlib.util.find_spec("prometheus_client") is None:
        raise InputError(f"--metrics-port needs prometheus-client: {METRICS_EXTRA}")


def _metrics_observer(engine: Engine) -> MetricsObserver:
    return engine.metrics_observer()


def _serve_metrics(metrics: MetricsObserver, host: str, port: int, runner: Worker) -> WSGIServer:
    from flow_cli.engine.metrics import serve

    try:
        return serve(metrics, port, host, liveness=runner.liveness)
    except OSError as error:
        reason = error.strerror or str(error)
        raise FlowError(
            f"--metrics-port {port}: cannot listen on port {port} of {host}: {reason}"
        ) from None


def stopped_summary(stats: WorkerStats) -> str:
    """The worker's last line: what it did, counted with the right plurals."""

    def count(n: int, noun: str) -> str:
        return f"{n} {noun}" if n == 1 else f"{n} {noun}s"

    return (
        f"worker stopped: {count(stats.runs_decided, 'run')} decided, "
        f"{count(stats.steps_run, 'step')} run, {count(stats.store_errors, 'database error')}"
    )


def _thread_crashed(args: threading.ExceptHookArgs) -> None:
    """A crashed helper thread is one line on stderr, not a traceback."""
    from flow_cli.cli import logs

    name = args.thread.name if args.thread is not None else "a worker thread"
    error = f"{args.exc_type.__name__}: {one_line(str(args.exc_value))}"
    logs.say(f"{name} crashed: {error}", "thread_crashed", "error", thread=name, error=error)


def _banner(
    engine: Engine, concurrency: int, lease_seconds: float, port: int | None, host: str
) -> str:
    builds = ", ".join(engine.build_ids)
    where = f"[{host}]" if ":" in host else host
    metrics = f"; metrics on http://{where}:{port}/metrics" if port is not None else ""
    return (
        f"worker {engine.worker_id}: builds {builds}; {concurrency} step threads, "
        f"leases {lease_seconds:g} s{metrics}. Ctrl-C or SIGTERM to stop."
    )


class _OutageReporter:
    """``on_store_error``: one clear line per database outage, then the worker retries."""

    def __init__(self, observer: Observer) -> None:
        self._reported: set[int] = set()
        self.observer = observer

    def __call__(self, error: StoreError) -> None:
        self._reported.add(id(error))
        self.observer.store_error(error)

    def already_reported(self, record: logging.LogRecord) -> bool:
        """Logging filter: drop the worker's own log line for an error printed above."""
        args = record.args
        first = args[0] if isinstance(args, tuple) and args else None
        return first is None or id(first) not in self._reported


def _abort() -> None:
    from flow_cli.cli import logs

    logs.say(
        "aborted; unfinished step attempts are retried after their lease expires",
        "worker_aborted",
    )
    sys.stdout.flush()
    os._exit(130)


def _watch_parent(runner: Worker) -> None:
    """In a child of ``flow worker --processes``: stop when the parent is asked to or dies."""
    from flow_cli.cli import logs
    from flow_cli.cli.worker_processes import watch_parent

    def stop() -> None:
        if not runner.stopping:
            logs.say(
                "stopping after the attempts in hand (flow worker --processes was asked to stop)",
                "worker_stopping",
                signal="parent",
            )
            runner.stop()

    watch_parent(stop, _abort)


def _install_stop_handlers(stop: Callable[[], None]) -> dict[int, Any]:
    """SIGINT/SIGTERM stop the worker cleanly; a second one aborts at once (exit 130).

    Only signals count: a worker that its parent (``--processes``) stopped still takes the
    Ctrl-C that reaches its whole process group as a first signal, not as an abort.
    """

    from flow_cli.cli import logs

    signalled = False

    def handle(signum: int, frame: FrameType | None) -> None:
        nonlocal signalled
        if signalled:
            _abort()
        signalled = True
        name = signal.Signals(signum).name
        logs.say(
            f"{name}: stopping after the attempts in hand (again to abort)",
            "worker_stopping",
            signal=name,
        )
        stop()

    previous: dict[int, Any] = {}
    for signum in (signal.SIGINT, signal.SIGTERM):
        previous[signum] = signal.signal(signum, handle)
    return previous
