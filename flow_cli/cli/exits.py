"""Exit codes, and which error gets which.

0 success · 1 the operation failed · 2 usage or input error · 3 ``replay-check`` found a
divergence · 4 the run ended other than Completed · 5 timed out waiting · 130 interrupted.
"Input error" means the caller can fix the command: a bad JSON value, an unknown workflow,
run, hook token or build id, an unusable ``flow.toml``. "Failed" means the request was well
formed but could not be carried out: the database is missing or locked, the run already ended,
the hook was already resolved.
"""

from __future__ import annotations

from flow_cli.errors import (
    BuildNotHosted,
    ConfigError,
    FlowError,
    HookNotFound,
    InputError,
    RunAlreadyExists,
    RunNotFound,
    WorkflowNotFound,
)

OK = 0
FAILED = 1
USAGE = 2
DIVERGED = 3
ENDED_OTHERWISE = 4
"""``result``, ``execute``, ``history --exit-status``: the run ended other than Completed."""
TIMED_OUT = 5
"""``result --wait``, ``execute``: the timeout passed before the run ended."""
INTERRUPTED = 130

INPUT_ERRORS: tuple[type[FlowError], ...] = (
    InputError,
    RunNotFound,
    RunAlreadyExists,
    WorkflowNotFound,
    BuildNotHosted,
    HookNotFound,
    ConfigError,
)


def exit_code(error: FlowError) -> int:
    """2 for errors the caller can fix in the command line or config, 1 for the rest."""
    return USAGE if isinstance(error, INPUT_ERRORS) else FAILED


HELP = """\
\b
Exit codes:
  0    success
  1    the operation failed (database missing or locked, run already ended, ...)
  2    usage or input error (bad JSON, unknown workflow, run, hook token or build)
  3    replay-check found a divergence
  4    the run ended other than Completed (result, execute, history --exit-status)
  5    timed out waiting for the run (result --wait, execute)
  130  interrupted (Ctrl-C)
"""
