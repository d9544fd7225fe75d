"""Plain input and output: JSON arguments in, JSON documents and text lines out.

Nothing here imports Rich: ``--json`` output and error lines must stay plain and cheap.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from flow_cli.errors import InputError
from flow_cli.model.jsonval import MAX_DEPTH, JsonLimitError, check_limits, parse_int
from flow_cli.model.names import escape_controls, escape_json_controls


def parse_json_arg(value: str | None, option: str) -> Any:
    """Parse ``--input`` / ``--payload``: literal JSON, ``@file.json``, or ``-`` for stdin.

    ``None`` (option not given) is the JSON ``null``. Raises ``InputError`` with one sentence.
    """
    if value is None:
        return None
    if value == "-":
        text = sys.stdin.read()
        source = f"{option} - (stdin)"
    elif value.startswith("@"):
        path = Path(value[1:]).expanduser()
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise InputError(f"{option} {value}: file {path} does not exist.") from None
        except (OSError, UnicodeDecodeError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise InputError(f"{option} {value}: cannot read {path}: {reason}.") from None
        source = f"{option} {value}"
    else:
        text = value
        source = option
    text = text.removeprefix("\ufeff")  # a UTF-8 byte order mark (Windows editors write one)
    try:
        parsed = json.loads(text, parse_int=parse_int)
        check_limits(parsed)
    except JsonLimitError as exc:
        raise InputError(f"{source} is refused: {exc}.") from None
    except RecursionError:
        raise InputError(
            f"{source} is refused: it is nested more than {MAX_DEPTH} levels deep (Flow's limit)."
        ) from None
    except json.JSONDecodeError as exc:
        raise InputError(
            f"{source} is not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno}). "
            "Quote strings as JSON, e.g. '\"text\"', or pass @file.json."
        ) from None
    try:
        json.dumps(parsed, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise InputError(
            f"{source} is not valid Unicode: it holds a lone surrogate escape such as "
            "\\ud800 or bytes that are not UTF-8."
        ) from None
    return parsed


def check_arguments(args: Sequence[str]) -> None:
    """Refuse command-line arguments that are not valid Unicode (bytes that are not UTF-8).

    Python hands such bytes over as lone surrogates, which no database can store as text.
    """
    for arg in args:
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            shown = arg.encode("utf-8", "replace").decode("utf-8")
            raise InputError(
                f"Argument {shown!r} is not valid Unicode: it holds bytes that are not UTF-8."
            ) from None


def dumps(value: Any, *, compact: bool = False) -> str:
    """JSON text for stdout: indented documents, or one compact line for NDJSON.

    Control and format characters inside strings are ``\\uNNNN`` escapes (the same value for
    a parser), so a document on a terminal cannot drive it.
    """
    if compact:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
    else:
        text = json.dumps(value, ensure_ascii=False, indent=2, default=str)
    return escape_json_controls(text)


def emit_json(value: Any, *, compact: bool = False) -> None:
    """Write one JSON document (or NDJSON line) to stdout and flush it."""
    sys.stdout.write(dumps(value, compact=compact) + "\n")
    sys.stdout.flush()


def emit_json_streamed(document: Mapping[str, Any], key: str, items: Iterable[Any]) -> None:
    """``emit_json(document)`` where ``document[key]`` (a top-level key) is the list of
    ``items``, written an item at a time (the same bytes): a document listing a million
    entries is never one string or one list of dicts in memory."""
    marker = "\x00streamed\x00"
    head, _, tail = dumps({**document, key: marker}).partition(dumps(marker))
    sys.stdout.write(head)
    written = 0
    for item in items:
        sys.stdout.write(("[\n    " if not written else ",\n    ") + _indented(dumps(item), 4))
        written += 1
    sys.stdout.write(("\n  ]" if written else "[]") + tail + "\n")
    sys.stdout.flush()


def _indented(text: str, by: int) -> str:
    return text.replace("\n", "\n" + " " * by)


def out(line: str) -> None:
    """A plain line of data on stdout (the caller escapes what it quotes from stored data)."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def out_row(*fields: str) -> None:
    """A tab-separated line of data on stdout, control characters in each field escaped."""
    out("\t".join(escape_controls(field) for field in fields))


def note(line: str) -> None:
    """A status line on stderr (progress, warnings): never mixed into the data on stdout."""
    sys.stderr.write(escape_controls(line) + "\n")
    sys.stderr.flush()


def one_line(text: str) -> str:
    """Collapse a message to one line (error lines are exactly one line).

    Control characters left after that (ESC, NUL, C1, ...) are shown as ``\\xNN``: a message may
    quote stored data, even a corrupt page's raw bytes, and none may reach the terminal raw.
    """
    return escape_controls(" ".join(text.split()))


def short_json(value: Any, limit: int = 80) -> str:
    """Compact JSON text of ``value``, cut to ``limit`` characters with an ellipsis."""
    try:
        text = dumps(value, compact=True)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def short_text(text: str, limit: int = 80) -> str:
    """``text`` on one line, cut to ``limit`` characters with an ellipsis."""
    flat = one_line(text)
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
