"""``flow start --from-jsonl FILE|-``: many runs from JSON lines, one result line each.

Each line is ``{"run_id", "workflow", "input"?, "build_id"?, "attributes"?}`` (attributes:
search attributes, as ``--attr`` sets them). A file that is not JSON lines at all is refused
whole (exit 2, nothing started). A line whose value breaks one of Flow's limits (an integer of
5,000 digits, nesting too deep), whose attributes are not allowed or whose run id is refused
fails alone: its result line says so and the other lines are started. Every result line's
detail starts with ``line N:``, the line of the file it answers.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from flow_cli.cli.bulk import act_on_all
from flow_cli.cli.state import CliState
from flow_cli.errors import InputError
from flow_cli.model.jsonval import MAX_DEPTH, JsonLimitError, check_limits, parse_int

if TYPE_CHECKING:
    from flow_cli.ops.bulk import BulkResult, StartLine

UNKNOWN_RUN = "-"
"""The run id of a result line whose line could not be read far enough to find one."""


@dataclass(frozen=True, slots=True)
class _Line:
    number: int
    run_id: str
    start: StartLine | None
    problem: str | None
    """Why this line alone fails (``start`` is then None)."""


def start_from_jsonl(ctx: typer.Context, source: str, as_json: bool, jsonl: bool) -> None:
    """Start one run per line of ``source`` (a file, or ``-`` for stdin); idempotent."""
    if source == "-":
        text = sys.stdin.read()
    else:
        try:
            text = Path(source).expanduser().read_text(encoding="utf-8")
        except OSError as exc:
            raise InputError(f"--from-jsonl {source}: {exc.strerror or exc}.") from None
        except UnicodeDecodeError:
            raise InputError(f"--from-jsonl {source}: the file is not UTF-8 text.") from None
    lines = [_read_line(number, raw) for number, raw in enumerate(text.splitlines(), 1)]
    found = [line for line in lines if line is not None]
    state = CliState.of(ctx)
    with state.open_engine(create=True, with_runtimes=True) as engine:
        from flow_cli.ops.bulk import start_runs

        def results(_ids: list[str]) -> Iterator[BulkResult]:
            from flow_cli.ops.bulk import BulkResult, Outcome

            started = start_runs(engine, [line.start for line in found if line.start])
            for line in found:
                if line.start is None:
                    result = BulkResult(line.run_id, Outcome.FAILED, str(line.problem))
                else:
                    result = next(started)
                yield replace(result, detail=f"line {line.number}: {result.detail}")

        ids = [line.run_id for line in found]
        act_on_all(state, engine, ids, verb="start", as_json=as_json, jsonl=jsonl, results=results)


def _read_line(number: int, raw: str) -> _Line | None:
    """One line: a run to start, a failure of this line alone, or ``InputError`` (the file)."""
    from flow_cli.ops.bulk import StartLine

    if not raw.strip():
        return None
    problem: str | None = None
    try:
        data = json.loads(raw, parse_int=parse_int)
        check_limits(data)
    except JsonLimitError as exc:
        problem = f"the line is refused: {exc}."
        data = _lenient(raw)
    except RecursionError:
        problem = (
            f"the line is refused: it is nested more than {MAX_DEPTH} levels deep (Flow's limit)."
        )
        data = None
    except ValueError as exc:
        raise InputError(f"--from-jsonl line {number} is not JSON: {exc}.") from None
    if problem is not None:
        run_id = data.get("run_id") if isinstance(data, dict) else None
        shown = run_id if isinstance(run_id, str) and run_id else UNKNOWN_RUN
        return _Line(number, shown, None, problem)
    if not isinstance(data, dict) or not isinstance(data.get("workflow"), str):
        raise InputError(f'--from-jsonl line {number}: needs at least a "workflow" string.')
    run_id = data.get("run_id")
    build_id = data.get("build_id")
    if not isinstance(run_id, str) or not (build_id is None or isinstance(build_id, str)):
        raise InputError(
            f'--from-jsonl line {number}: "run_id" must be a string (it makes the start '
            'idempotent) and "build_id", when given, a string.'
        )
    start = StartLine(run_id, data["workflow"], data.get("input"), build_id, data.get("attributes"))
    return _Line(number, run_id, start, None)


def _lenient(raw: str) -> Any:
    """``raw`` parsed without Flow's limits, only to find the run id of a refused line."""
    try:
        return json.loads(raw, parse_int=lambda _text: 0)
    except (RecursionError, ValueError):
        return None
