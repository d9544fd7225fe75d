"""Whether this process traces (``OTEL_TRACES_EXPORTER``), and its tracing observer.

Reading the variables imports nothing; OpenTelemetry (``flow_cli.engine.tracing``) is imported
only when they ask for traces, and its absence then is a usage error naming the extra.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING

from flow_cli.errors import InputError

if TYPE_CHECKING:
    from flow_cli.engine.tracing import TracingObserver

OTEL_EXTRA = "pip install 'flow-cli[otel]'"


def tracing_wanted(environ: Mapping[str, str] | None = None) -> bool:
    """Whether ``OTEL_TRACES_EXPORTER`` names an exporter (and ``OTEL_SDK_DISABLED`` is not
    ``true``)."""
    env = os.environ if environ is None else environ
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    names = {n.strip().lower() for n in env.get("OTEL_TRACES_EXPORTER", "").split(",")}
    return bool(names - {"", "none"})


def tracing_observer() -> TracingObserver | None:
    """The observer exporting spans as the ``OTEL_*`` variables say, or ``None`` when they
    ask for none. Raises ``InputError`` when they do and the extra is not installed."""
    if not tracing_wanted():
        return None
    if importlib.util.find_spec("opentelemetry") is None or (
        importlib.util.find_spec("opentelemetry.sdk") is None
    ):
        raise InputError(
            f"OTEL_TRACES_EXPORTER is set but traces need the otel extra: {OTEL_EXTRA}"
        )
    from flow_cli.engine.tracing import TracingObserver, provider_from_env

    return TracingObserver(provider_from_env())
