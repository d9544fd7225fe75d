"""The traceback a failed decision or step attempt records: where the raising code was.

Only the frames of the workflow or step code are kept — Flow's own frames (the decision loop,
the step executor, ``ctx`` helpers) and ``asyncio``'s say nothing about the author's mistake —
innermost first when something must go, at most ``MAX_TRACEBACK_BYTES``; never locals (they
may hold payloads and secrets).
"""

from __future__ import annotations

import os
import traceback

from flow_cli.model.jsonval import storable_text

MAX_TRACEBACK_BYTES = 8 * 1024
"""The most a recorded traceback holds (UTF-8); outer frames are left out first."""

_HIDDEN = (
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep,  # flow_cli/
    # asyncio's package, found beside os's without importing it (~10 ms a process).
    os.path.join(os.path.dirname(os.path.abspath(os.__file__)), "asyncio") + os.sep,
)


def code_traceback(error: BaseException) -> str | None:
    """``Traceback (most recent call last): ...`` of the frames of the author's code that
    ``error`` passed through, ending with ``ErrorType: message``; ``None`` when there are none
    (the error was Flow's own finding, as a non-determinism in a returned command)."""
    frames = [
        frame
        for frame in traceback.extract_tb(error.__traceback__)
        if not os.path.abspath(frame.filename).startswith(_HIDDEN)
    ]
    if not frames:
        return None
    header = "Traceback (most recent call last):\n"
    footer = "".join(traceback.format_exception_only(type(error), error))
    lines = traceback.format_list(frames)
    budget = MAX_TRACEBACK_BYTES - len(_utf8(header + footer)) - 80
    kept: list[str] = []
    for line in reversed(lines):
        size = len(_utf8(line))
        if size > budget:
            break
        kept.append(line)
        budget -= size
    left_out = len(lines) - len(kept)
    note = f"  ... {left_out} outer frame(s) left out\n" if left_out else ""
    text = storable_text(header + note + "".join(reversed(kept)) + footer)
    return _utf8(text)[:MAX_TRACEBACK_BYTES].decode(errors="ignore")


def _utf8(text: str) -> bytes:
    # A message may hold a lone surrogate, which UTF-8 cannot encode: escaped, not fatal.
    return text.encode("utf-8", "backslashreplace")


__all__ = ["MAX_TRACEBACK_BYTES", "code_traceback"]
