"""While workflow code decides, the wall clock, module-level randomness and fresh ids are refused.

A decision must give the same answer on every replay; ``time.time()``, ``datetime.now()``,
``random.random()`` or ``uuid.uuid4()`` in workflow code give another answer each time, and the
difference shows only later (a replay that diverges, or never, when the value decides a branch).
So Flow wraps those functions, once, with a check of a thread-local "deciding" mark: in the
thread that is running workflow code for a decision (``enter`` ... ``leave``) the call raises
``NonDeterministicCall`` naming the replacement (``ctx.now``, ``ctx.random()``,
``ctx.new_token()``); in every other thread (steps run meanwhile, the worker's own loop) the
wrapper only adds a thread-local read and calls the original.

Only calls made through the modules are seen (``time.time()``, ``random.choice(...)``,
``datetime.now()``); a name bound before Flow was imported (``from time import time``) keeps the
original function. ``logging`` may read the clock for its records. Workflow code that catches
the error and goes on does not escape it: the first refused call of a decision is kept and the
decision fails with it whatever the code returns.

``datetime.datetime`` is a built-in type whose attributes cannot be assigned; its ``now`` and
``utcnow`` are replaced in the type's own dictionary (then ``PyType_Modified``), the one way to
reach callers that wrote ``from datetime import datetime``. Where that is not possible (not
CPython), the ``datetime`` guard is left out and the other guards stay.
"""

from __future__ import annotations

import datetime as _datetime
import random as _random
import sys
import threading
import time as _time
import uuid as _uuid
from collections.abc import Callable
from typing import Any

from flow_cli.errors import NonDeterministicCall

ALLOWED_CALLERS = ("logging",)
"""Modules that may read the clock while workflow code decides (a log record's time)."""

RANDOM_FUNCTIONS = (
    "betavariate",
    "choice",
    "choices",
    "expovariate",
    "gammavariate",
    "gauss",
    "getrandbits",
    "lognormvariate",
    "normalvariate",
    "paretovariate",
    "randbytes",
    "randint",
    "random",
    "randrange",
    "sample",
    "shuffle",
    "triangular",
    "uniform",
    "vonmisesvariate",
    "weibullvariate",
)
"""The module-level functions of ``random`` (methods of its hidden shared generator)."""


class _State(threading.local):
    run_id: str | None = None
    """The run whose workflow code this thread is running, else ``None``."""
    refused: NonDeterministicCall | None = None
    """The first call refused in this decision."""


_state = _State()
_installed = False
_lock = threading.Lock()


def enter(run_id: str) -> str | None:
    """Mark this thread as deciding ``run_id``; returns what to hand back to ``leave``."""
    previous = _state.run_id
    _state.run_id = run_id
    _state.refused = None
    return previous


def leave(previous: str | None) -> NonDeterministicCall | None:
    """End the mark set by ``enter``; the first call it refused meanwhile, if any."""
    refused = _state.refused
    _state.run_id = previous
    _state.refused = None
    return refused


def deciding() -> str | None:
    """The run this thread is deciding, else ``None``."""
    return _state.run_id


def refused() -> NonDeterministicCall | None:
    """The first call refused in this thread's decision so far."""
    return _state.refused


def _refuse(run_id: str, call: str, replacement: str) -> NonDeterministicCall:
    error = NonDeterministicCall(run_id, call, replacement)
    if _state.refused is None:
        _state.refused = error
    return error


def _wrap(call: str, replacement: str, original: Callable[..., Any]) -> Callable[..., Any]:
    def guarded(*args: Any, **kwargs: Any) -> Any:
        run_id = _state.run_id
        if run_id is not None:
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if not caller.startswith(ALLOWED_CALLERS):
                raise _refuse(run_id, call, replacement)
        return original(*args, **kwargs)

    guarded.__wrapped__ = original  # type: ignore[attr-defined]
    guarded.__name__ = getattr(original, "__name__", call)
    guarded.__doc__ = getattr(original, "__doc__", None)
    return guarded


def _wrap_classmethod(call: str, replacement: str, original: Any) -> classmethod[Any, Any, Any]:
    def guarded(cls: type, *args: Any, **kwargs: Any) -> Any:
        run_id = _state.run_id
        if run_id is not None:
            caller = sys._getframe(1).f_globals.get("__name__", "")
            if not caller.startswith(ALLOWED_CALLERS):
                raise _refuse(run_id, call, replacement)
        return original.__get__(None, cls)(*args, **kwargs)

    guarded.__name__ = call.rsplit(".", 1)[-1]
    guarded.__doc__ = getattr(original, "__doc__", None)
    return classmethod(guarded)


def install() -> None:
    """Wrap the guarded functions (once per process; later calls do nothing)."""
    global _installed
    with _lock:
        if _installed:
            return
        _installed = True
        _time.time = _wrap("time.time()", "ctx.now", _time.time)
        for name in RANDOM_FUNCTIONS:
            original = getattr(_random, name, None)
            if original is not None:
                setattr(_random, name, _wrap(f"random.{name}()", "ctx.random()", original))
        _uuid.uuid1 = _wrap("uuid.uuid1()", "ctx.new_token(name)", _uuid.uuid1)
        _uuid.uuid4 = _wrap("uuid.uuid4()", "ctx.new_token(name)", _uuid.uuid4)
        _patch_datetime()


def _patch_datetime() -> None:
    try:
        import ctypes
        import gc

        cls = _datetime.datetime
        (namespace,) = [r for r in gc.get_referents(cls.__dict__) if isinstance(r, dict)]
        for name in ("now", "utcnow"):
            original = cls.__dict__[name]
            namespace[name] = _wrap_classmethod(f"datetime.{name}()", "ctx.now", original)
        ctypes.pythonapi.PyType_Modified(ctypes.py_object(cls))
    except Exception:  # not CPython: the other guards stay
        return


__all__ = [
    "ALLOWED_CALLERS",
    "RANDOM_FUNCTIONS",
    "deciding",
    "enter",
    "install",
    "leave",
    "refused",
]
