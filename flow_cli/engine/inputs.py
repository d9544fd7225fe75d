"""What the engine accepts from outside as JSON: an input, a payload, an update's args."""

from __future__ import annotations

from flow_cli.errors import InputError
from flow_cli.model.jsonval import JsonLimitError, JsonValue, normalise


def json_input(value: JsonValue, what: str) -> JsonValue:
    """``value`` normalised, or ``InputError`` (exit 2) when it is not JSON or over Flow's
    limits (``[flow] max_payload_bytes``); ``what`` names it in the message."""
    try:
        return normalise(value)
    except JsonLimitError as exc:
        raise InputError(f"the {what} is refused: {exc}.") from None
    except RecursionError:
        raise InputError(f"the {what} is refused: it is nested too deeply.") from None
    except (TypeError, ValueError) as exc:
        raise InputError(f"the {what} is not a JSON value: {exc}") from None
