"""JSON values and the canonical text used to compare and store them."""

from __future__ import annotations

import json
from typing import Any, TypeAlias

JsonValue: TypeAlias = Any
"""A value that ``json.dumps`` accepts: dict, list, str, int, float, bool or None."""


def canonical(value: JsonValue) -> str:
    """Stable text of a JSON value: equal values give equal text."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def normalise(value: JsonValue) -> JsonValue:
    """The value as it will read back from storage (tuples become lists, keys strings).

    Raises TypeError or ValueError when the value is not JSON.
    """
    return json.loads(json.dumps(value, allow_nan=False))
