"""The public names stay importable, and importing the package stays cheap."""

from __future__ import annotations

import subprocess
import sys

import flow_cli


def test_every_exported_name_resolves() -> None:
    for name in flow_cli.__all__:
        assert getattr(flow_cli, name) is not None, name


def test_exports_are_pinned() -> None:
    assert flow_cli.__all__ == [
        "TIMED_OUT",
        "Engine",
        "EventConflict",
        "FlowError",
        "ManualClock",
        "NonDeterminismError",
        "RetryPolicy",
        "RunNotFound",
        "RunStatus",
        "Runtime",
        "RuntimeCommand",
        "StepCancelled",
        "StepFailedError",
        "StepInfo",
        "StepStatus",
        "UpdateRejected",
        "WorkflowContext",
        "WorkflowNotFound",
        "WorkflowTerminalOutcome",
    ]


def test_importing_the_package_loads_no_storage_or_engine() -> None:
    code = (
        "import sys, flow_cli, flow_cli.errors;"
        "print(sorted(m for m in sys.modules if m.startswith(('flow_cli.engine', "
        "'flow_cli.store', 'sqlite_utils', 'psycopg', 'rich'))))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
