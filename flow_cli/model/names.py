"""Ids and names that enter from outside: run ids, workflow, signal and step names.

They end up in terminals, logs and file names, so characters that are invisible or that steer a
terminal are refused: every Unicode control character (category Cc: C0 including ESC, which
starts terminal escape sequences, DEL and C1), every format character (Cf: the bidirectional
overrides and isolates U+202A-U+202E and U+2066-U+2069, which reorder the text around them, and
the zero-width characters, the zero-width joiner U+200D included, and the byte order mark) and
the line and paragraph separators U+2028 and U+2029 (Zl, Zp). The zero-width joiner is refused
too: it is invisible, so two ids that print alike could differ; an emoji sequence that needs it
has no place in an id an operator types.

``escape_controls`` is the one way such characters are printed (stored data may hold them:
records written before the check, a corrupt page).
"""

from __future__ import annotations

import re

from flow_cli.errors import InputError

_BEYOND_C0 = (
    "\x7f-\x9f"  # Cc: DEL, C1
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e"  # Cf
    "\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f"  # Cf, Zl, Zp (bidi controls)
    "\ufeff\ufff9-\ufffb"  # Cf
    "\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"  # Cf
    "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"  # Cf (tags)
)
CONTROL_CHARACTERS = re.compile(f"[\x00-\x1f{_BEYOND_C0}]")
"""Unicode categories Cc, Cf, Zl and Zp (Unicode 15; tests/test_cli_hostile.py checks the set
against the running Python's ``unicodedata``)."""


def check_name(value: str, what: str) -> None:
    """Raise ``InputError`` if ``value`` (a ``what``, e.g. "run id") is empty or has controls."""
    if not value:
        raise InputError(f"The {what} is empty.")
    found = CONTROL_CHARACTERS.search(value)
    if found is not None:
        code = ord(found.group())
        kind = "control" if code < 0xA0 else "format"  # Cc, or Cf (bidi, zero-width), Zl, Zp
        raise InputError(
            f"The {what} {value!r} holds the {kind} character U+{code:04X}; use printable text."
        )


def _escaped(found: re.Match[str]) -> str:
    code = ord(found.group())
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def escape_controls(text: str) -> str:
    """``text`` with each control or format character shown as ``\\xNN``, ``\\uNNNN`` or
    ``\\UNNNNNNNN``: safe to print on a terminal."""
    return CONTROL_CHARACTERS.sub(_escaped, text)


def _json_escaped(found: re.Match[str]) -> str:
    code = ord(found.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # a UTF-16 surrogate pair, as JSON writes characters beyond the BMP
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def escape_json_controls(text: str) -> str:
    """JSON text with the control and format characters that ``json.dumps(...,
    ensure_ascii=False)`` leaves raw (DEL, C1, bidi overrides ...) written as ``\\uNNNN``.

    Such characters can only stand inside JSON strings, where the escape means the same
    character: the document is unchanged for a parser, and inert on a terminal.
    """
    return _JSON_RAW.sub(_json_escaped, text)


_JSON_RAW = re.compile(f"[{_BEYOND_C0}]")
"""What JSON text holds raw: ``json.dumps`` escapes C0 in strings, and C0 outside strings is
the layout (newlines, indentation) of the document."""


def check_run_id(run_id: str) -> None:
    """Raise ``InputError`` unless ``run_id`` may name a new run.

    Every way a run id is made goes through here: ``Engine.start`` (``flow start``, ``flow
    execute``), ``flow start --from-jsonl`` and ``flow fork --id``.
    """
    if not run_id or run_id.strip() != run_id:
        raise InputError(f"run id {run_id!r} must be non-empty text without surrounding spaces")
    check_name(run_id, "run id")
