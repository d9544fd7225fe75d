"""English for counts and types in messages: ``1 event``, ``2 events``, ``an int``."""

from __future__ import annotations


def plural(count: int, noun: str, many: str | None = None) -> str:
    """``1 event``, ``2 events`` (``many`` for irregular plurals: ``passes``)."""
    return f"{count} {noun if count == 1 else many or noun + 's'}"


def a(noun: str) -> str:
    """``noun`` with its indefinite article: ``an int``, ``a str``."""
    return f"{'an' if noun[:1].lower() in 'aeiou' else 'a'} {noun}"
