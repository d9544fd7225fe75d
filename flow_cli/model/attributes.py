"""Search attributes: small typed values a run is found by (``flow runs --attr k=v``).

A run's attributes come from three places, applied in this order, a later value replacing an
earlier one of the same key: the ``attributes=`` function of ``@runtime.workflow`` (called with
the run's input at start), ``flow start --attr k=v`` / ``engine.start(attributes=...)``, and
``ctx.set_attributes({...})`` in a decision (an ``attributes_set`` event).

Values are strings, numbers or booleans; anything else is an ``InputError`` naming what is
allowed. A number that is a whole float (``5.0``) is kept as the integer ``5``, so that ``5`` and
``5.0`` are one value. The index keeps each value as its JSON text (``"acme"``, ``5``, ``true``),
so matching is typed: the number 5 is not the string ``"5"``.

On the command line ``k=v`` is read by one rule (``parse_attribute``): the value is taken as
JSON when it reads as a JSON string, number or boolean, else as the text written. So
``n=5`` is the number 5, ``ok=true`` the boolean, ``customer=acme`` the string ``"acme"``, and
``'code="5"'`` the string ``"5"``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any, TypeAlias

from flow_cli.errors import InputError
from flow_cli.model.names import check_name

AttributeValue: TypeAlias = str | int | float | bool
"""What a search attribute holds."""

MAX_KEY_CHARS = 100
"""Longest attribute key."""
MAX_TEXT_CHARS = 1000
"""Longest string value (attributes are for finding runs, not for payloads)."""

ALLOWED = "a string, a number or a boolean"


def check_attributes(values: Any, where: str) -> dict[str, AttributeValue]:
    """``values`` checked and normalised; ``where`` names their source in the error
    (``ctx.set_attributes``, ``--attr``...). Raises ``InputError``."""
    if not isinstance(values, Mapping):
        raise InputError(
            f"{where}: search attributes are a mapping of key to value, not {type(values).__name__}"
        )
    return {check_key(key, where): check_value(key, value, where) for key, value in values.items()}


def check_key(key: Any, where: str) -> str:
    """An attribute key: non-empty text without control characters, at most 100 characters,
    no ``=``."""
    if not isinstance(key, str):
        raise InputError(f"{where}: an attribute key must be text, not {type(key).__name__}")
    check_name(key, f"attribute key ({where})")
    if "=" in key or len(key) > MAX_KEY_CHARS or key != key.strip():
        raise InputError(
            f"{where}: attribute key {key!r} must be at most {MAX_KEY_CHARS} characters, "
            "without '=' or surrounding spaces"
        )
    return key


def check_value(key: str, value: Any, where: str) -> AttributeValue:
    """A value of attribute ``key``: text, a finite number or a boolean."""
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        if len(str(abs(value))) > 18:
            raise InputError(f"{where}: attribute {key!r}: the integer {value} is too large")
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InputError(f"{where}: attribute {key!r} must be a finite number, not {value}")
        return int(value) if value.is_integer() and abs(value) < 1e15 else value
    if isinstance(value, str):
        if "\x00" in value or len(value) > MAX_TEXT_CHARS:
            raise InputError(
                f"{where}: attribute {key!r}: text must be at most {MAX_TEXT_CHARS} characters "
                "without NUL"
            )
        return value
    raise InputError(
        f"{where}: attribute {key!r} is {type(value).__name__}; a search attribute is {ALLOWED}"
    )


def attribute_text(value: AttributeValue) -> str:
    """The JSON text the run index keeps for a value (what filters compare)."""
    return json.dumps(value, ensure_ascii=False)


def attribute_from_text(text: str) -> AttributeValue:
    """The value of a stored JSON text (``attribute_text``'s inverse)."""
    value: AttributeValue = json.loads(text)
    return value


def parse_attribute(text: str, option: str = "--attr") -> tuple[str, AttributeValue]:
    """``KEY=VALUE`` as the command line gives it: the value is JSON when it reads as a JSON
    string, number or boolean, else the text as written (``n=5`` is a number, ``ok=true`` a
    boolean, ``c=acme`` text, ``'c="5"'`` the text ``5``). Raises ``InputError``."""
    key, sep, raw = text.partition("=")
    if not sep:
        raise InputError(f"{option} {text!r}: write KEY=VALUE (a value is {ALLOWED})")
    if not key:
        raise InputError(f"{option} {text!r}: the key before '=' is empty")
    key = check_key(key, option)
    value: Any = raw
    try:
        parsed = json.loads(raw)
    except ValueError:
        parsed = None
    if isinstance(parsed, (str, bool, int)) or (
        isinstance(parsed, float) and math.isfinite(parsed)
    ):
        value = parsed
    return key, check_value(key, value, option)


def parse_attributes(texts: list[str] | tuple[str, ...] | None) -> dict[str, AttributeValue]:
    """Several ``KEY=VALUE`` texts (repeated ``--attr``); a key given twice keeps the last."""
    return dict(parse_attribute(text) for text in texts or ())


def attribute_label(text: str) -> str:
    """How ``flow count --by attr:KEY`` names a stored value: text as itself, numbers and
    booleans as their JSON."""
    value = attribute_from_text(text)
    return value if isinstance(value, str) else text


__all__ = [
    "ALLOWED",
    "AttributeValue",
    "attribute_from_text",
    "attribute_label",
    "attribute_text",
    "check_attributes",
    "check_key",
    "check_value",
    "parse_attribute",
    "parse_attributes",
]
