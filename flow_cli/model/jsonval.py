"""JSON values, the canonical text used to compare and store them, and the limits Flow accepts.

Limits (checked where values enter from outside: ``Engine.start`` input, ``Engine.signal`` and
``Engine.resolve_hook`` payloads, and the command line's ``--input``/``--payload``):

- ``MAX_DEPTH`` = 100 levels of nested arrays and objects;
- ``MAX_INT_DIGITS`` = 1,000 decimal digits in an integer (Python's own default, 4,300, depends
  on the interpreter's settings; Flow's limit does not).

A value beyond them is an input error (exit 2 on the command line), never a crash deep inside
the JSON encoder.
"""

from __future__ import annotations

import json
import math
from typing import Any, TypeAlias

JsonValue: TypeAlias = Any
"""A value that ``json.dumps`` accepts: dict, list, str, int, float, bool or None."""

MAX_DEPTH = 100
"""Deepest nesting of arrays and objects accepted in a run input or payload."""

MAX_INT_DIGITS = 1000
"""Most decimal digits accepted in one integer of a run input or payload."""


class JsonLimitError(ValueError):
    """A JSON value is nested too deeply or holds too large an integer."""


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
_STRICT = json.JSONEncoder(allow_nan=False)
# Encoders made once: ``json.dumps`` with any option builds a new encoder on every call, and
# the engine encodes several values per decision.
_AS_STORED = (str, int, bool, type(None))
"""Exact types a JSON round trip gives back unchanged (a subclass, like an ``IntEnum``, is
not one: it reads back as its base)."""


def canonical(value: JsonValue) -> str:
    """Stable text of a JSON value: equal values give equal text."""
    return _CANONICAL.encode(value)


def check_limits(value: JsonValue) -> None:
    """Raise ``JsonLimitError`` if ``value`` exceeds ``MAX_DEPTH`` or ``MAX_INT_DIGITS``.

    Walks without recursion, so any depth is measured safely.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list | tuple):
            if depth >= MAX_DEPTH:
                raise JsonLimitError(
                    f"it is nested more than {MAX_DEPTH} levels deep (Flow's limit)"
                )
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(item, int) and not isinstance(item, bool):
            _check_int_size(item)


def _check_int_size(number: int) -> None:
    # The bit length bounds the digit count without converting (str() itself may refuse).
    bits = abs(number).bit_length()
    if bits <= _SAFE_BITS:
        return
    if bits > _SAFE_BITS + 1 or len(str(abs(number))) > MAX_INT_DIGITS:
        raise JsonLimitError(
            f"it holds an integer of more than {MAX_INT_DIGITS:,} digits (Flow's limit)"
        )


_SAFE_BITS = math.floor(MAX_INT_DIGITS * math.log2(10))
"""An integer of at most this many bits has at most ``MAX_INT_DIGITS`` digits."""


def parse_int(text: str) -> int:
    """``json.loads(parse_int=...)``: refuse an integer literal over ``MAX_INT_DIGITS`` digits."""
    if len(text.lstrip("-")) > MAX_INT_DIGITS:
        raise JsonLimitError(
            f"it holds an integer of {len(text.lstrip('-')):,} digits; "
            f"Flow accepts at most {MAX_INT_DIGITS:,}"
        )
    return int(text)


def normalise(value: JsonValue) -> JsonValue:
    """The value as it will read back from storage (tuples become lists, keys strings).

    Raises TypeError or ValueError when the value is not JSON, and ``JsonLimitError`` (a
    ``ValueError``) when it exceeds Flow's limits.
    """
    check_limits(value)
    if type(value) in _AS_STORED:
        return value  # reads back as itself: no round trip needed
    return json.loads(_STRICT.encode(value))
