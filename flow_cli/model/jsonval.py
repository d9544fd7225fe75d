"""JSON values, the canonical text used to compare and store them, and the limits Flow accepts.

Limits (checked where values enter from outside: ``Engine.start`` input, ``Engine.signal`` and
``Engine.resolve_hook`` payloads, and the command line's ``--input``/``--payload``):

- ``MAX_DEPTH`` = 100 levels of nested arrays and objects;
- ``MAX_INT_DIGITS`` = 1,000 decimal digits in an integer (Python's own default, 4,300, depends
  on the interpreter's settings; Flow's limit does not);
- no NUL character (U+0000) in any string, key or value: PostgreSQL cannot hold one in text
  or ``jsonb``, and a value must be storable the same way on every backend;
- no lone surrogate (U+D800 to U+DFFF outside a pair, which only Python strings can hold): UTF-8
  cannot encode one, so neither SQLite nor PostgreSQL can store it;
- ``MAX_PAYLOAD_BYTES`` = 2 MiB of JSON text (UTF-8, compact) per value (``[flow]
  max_payload_bytes``, see ``set_payload_limit``), checked by ``normalise``: run inputs and
  results, step inputs and outputs, signal and hook payloads.

A value beyond them is an input error (exit 2 on the command line), never a crash deep inside
the JSON encoder, and never a commit the database refuses later.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, TypeAlias

JsonValue: TypeAlias = Any
"""A value that ``json.dumps`` accepts: dict, list, str, int, float, bool or None."""

MAX_DEPTH = 100
"""Deepest nesting of arrays and objects accepted in a run input or payload."""

MAX_INT_DIGITS = 1000
"""Most decimal digits accepted in one integer of a run input or payload."""

MAX_PAYLOAD_BYTES = 2 * 1024 * 1024
"""Largest JSON text (UTF-8 bytes, compact) of one stored value by default (DESIGN §2.6)."""

_payload_limit = MAX_PAYLOAD_BYTES


def set_payload_limit(max_bytes: int) -> None:
    """Set the process's cap on one value's JSON text (``[flow] max_payload_bytes``).

    Process-wide, as the config file it comes from is: the command line sets it once, before it
    opens the database, and every check in the process (the door, step outputs, the values
    workflow code builds) uses it.
    """
    global _payload_limit
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise ValueError(f"the payload limit must be a positive number of bytes, not {max_bytes!r}")
    _payload_limit = max_bytes


def payload_limit() -> int:
    """The cap ``normalise`` applies unless told another (``set_payload_limit``)."""
    return _payload_limit


class JsonLimitError(ValueError):
    """A JSON value is nested too deeply, holds too large an integer or a NUL, or is too big."""


class JsonNulError(JsonLimitError):
    """A string (a key or a value) holds the NUL character U+0000, which Flow does not store."""

    def __init__(self) -> None:
        super().__init__(
            "it holds a NUL character (\\u0000), which Flow cannot store; remove it, or "
            "encode binary data (e.g. as base64)"
        )


class JsonSurrogateError(JsonLimitError):
    """A string holds a lone surrogate (U+D800 to U+DFFF), which UTF-8 cannot encode."""

    def __init__(self) -> None:
        super().__init__(
            "it holds a lone surrogate (U+D800..U+DFFF outside a pair): not valid Unicode, which "
            "UTF-8 and so Flow cannot store; decode the text it came from correctly"
        )


_SURROGATE = re.compile("[\ud800-\udfff]")


def _check_text(text: str) -> None:
    if "\x00" in text:
        raise JsonNulError()
    if not text.isascii() and _SURROGATE.search(text):
        raise JsonSurrogateError()


class PayloadTooLarge(JsonLimitError):
    """A value's JSON text is larger than ``MAX_PAYLOAD_BYTES``."""

    def __init__(self, size: int, limit: int) -> None:
        super().__init__(
            f"its JSON text is {size:,} bytes, more than Flow's limit of {limit:,} bytes "
            "([flow] max_payload_bytes); store large data elsewhere and pass a reference"
        )
        self.size = size
        self.limit = limit


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
_STRICT = json.JSONEncoder(allow_nan=False)
# Encoders made once: ``json.dumps`` with any option builds a new encoder on every call, and
# the engine encodes several values per decision.
_AS_STORED = (str, int, bool, type(None))
"""Exact types a JSON round trip gives back unchanged (a subclass, like an ``IntEnum``, is
not one: it reads back as its base)."""


def json_fields(obj: object, *names: str) -> dict[str, Any]:
    """``{name: obj.name}`` for each of ``names``, in that order: the plain part of a
    ``to_json``."""
    return {name: getattr(obj, name) for name in names}


def canonical(value: JsonValue) -> str:
    """Stable text of a JSON value: equal values give equal text."""
    return _CANONICAL.encode(value)


def check_limits(value: JsonValue, *, string_keys: bool = False) -> None:
    """Raise ``JsonLimitError`` if ``value`` exceeds ``MAX_DEPTH`` or ``MAX_INT_DIGITS``, or
    ``JsonNulError`` if a key or string in it holds U+0000. With ``string_keys``, a key that is
    not a string is a ``TypeError`` (else it becomes one, as ``json.dumps`` makes it).

    Walks without recursion, so any depth is measured safely.
    """
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, str):
            _check_text(item)
        elif isinstance(item, dict | list | tuple):
            if depth >= MAX_DEPTH:
                raise JsonLimitError(
                    f"it is nested more than {MAX_DEPTH} levels deep (Flow's limit)"
                )
            if isinstance(item, dict):
                for key in item:
                    if isinstance(key, str):
                        _check_text(key)
                    elif string_keys:
                        raise TypeError(
                            f"an object has a key of type {type(key).__name__} ({key!r}); "
                            "JSON keys are strings"
                        )
                children: Any = item.values()
            else:
                children = item
            stack.extend((child, depth + 1) for child in children)
        elif isinstance(item, int) and not isinstance(item, bool):
            _check_int_size(item)


def storable_text(text: str) -> str:
    """``text`` (an error message Flow records) with each NUL shown as ``\\u0000``: the text
    comes from an exception, not from the user's data, so it is made storable rather than
    refused."""
    return text.replace("\x00", "\\u0000") if "\x00" in text else text


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


def normalise(
    value: JsonValue, max_bytes: int | None = None, *, string_keys: bool = False
) -> JsonValue:
    """The value as it will read back from storage (tuples become lists, keys strings).

    Raises TypeError or ValueError when the value is not JSON (with ``string_keys``, when a
    key is not a string), and ``JsonLimitError`` (a ``ValueError``) when it exceeds Flow's
    limits: ``JsonNulError`` for a NUL, ``PayloadTooLarge`` when its JSON text is over
    ``max_bytes``.
    """
    check_limits(value, string_keys=string_keys)
    if max_bytes is None:
        max_bytes = _payload_limit
    if type(value) in _AS_STORED:
        if type(value) is str and len(value) * 4 > max_bytes:  # UTF-8: at most 4 bytes a char
            _check_size(value, max_bytes)
        return value  # reads back as itself: no round trip needed
    text = _STRICT.encode(value)
    if len(text) > max_bytes:  # ASCII with escapes and spaces: never shorter than compact UTF-8
        _check_size(value, max_bytes)
    return json.loads(text)


def _check_size(value: JsonValue, max_bytes: int) -> None:
    size = len(_COMPACT.encode(value).encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise PayloadTooLarge(size, max_bytes)


_COMPACT = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
