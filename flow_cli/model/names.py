"""Ids and names that enter from outside: run ids, workflow, signal and step names.

They end up in terminals, logs and file names, so control characters are refused: C0
(U+0000-U+001F, including ESC, which starts terminal escape sequences), DEL (U+007F) and C1
(U+0080-U+009F).
"""

from __future__ import annotations

import re

from flow_cli.errors import InputError

CONTROL_CHARACTERS = re.compile("[\x00-\x1f\x7f-\x9f]")
"""C0 controls, DEL and C1 controls."""


def check_name(value: str, what: str) -> None:
    """Raise ``InputError`` if ``value`` (a ``what``, e.g. "run id") is empty or has controls."""
    if not value:
        raise InputError(f"The {what} is empty.")
    found = CONTROL_CHARACTERS.search(value)
    if found is not None:
        raise InputError(
            f"The {what} {value!r} holds the control character "
            f"U+{ord(found.group()):04X}; use printable text."
        )


def escape_controls(text: str) -> str:
    """``text`` with each control character shown as ``\\xNN``, safe to print on a terminal."""
    return CONTROL_CHARACTERS.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
