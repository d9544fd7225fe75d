"""Hostile input at the command line: absurd numbers and durations, control characters in ids,
export targets that are not regular files, and a corrupt database.

Each case is one ``error: ...`` line on stderr and the right exit code, never a traceback.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cli_helpers import FlowProject

from flow_cli.cli.reference import option_names, root_command, walk


@pytest.fixture
def project(tmp_path: Path) -> FlowProject:
    return FlowProject(tmp_path)


@pytest.fixture(scope="module")
def refusing(tmp_path_factory: pytest.TempPathFactory) -> FlowProject:
    """A project with one run ``a``, shared by the cases that must change nothing."""
    project = FlowProject(tmp_path_factory.mktemp("refusing"))
    project.setup("start", "two-step", "--id", "a")
    return project


# -- item 7: numeric and duration options ------------------------------------------------------

INTEGERS = ("99999999999999999999", "9223372036854775808")
FLOATS = ("nan", "inf", "1e400")
DURATIONS = ("nan", "inf", "1e22s", "999999999999d")
TIMES = (*DURATIONS, "0001-01-01T00:00:00+01:00")

COMMAND_ARGS: dict[str, tuple[str, ...]] = {
    "tick": (),
    "worker": (),
    "signal": ("go",),
    "cancel": (),
    "terminate": (),
    "runs": (),
    "count": (),
    "upgrade": ("--from", "cli-1", "--to", "cli-2"),
    "export": ("-o", "exported"),
    "result": ("a", "--wait"),
    "execute": ("two-step",),
    "doctor": (),
}
"""What each command needs besides the option under test (its other required arguments)."""

IN_PROCESS_UNSAFE = {"tick", "worker"}
"""Commands run as real processes with a timeout: an accepted value would start real work."""


def _kind(param: Any) -> str | None:
    """Which hostile values an option gets: by its type, else by its metavar."""
    descriptor = getattr(param, "type_descriptor", None)
    annotation = getattr(descriptor, "annotation", None)
    if annotation in (int, int | None):
        return "int"
    if annotation in (float, float | None):
        return "float"
    return {"DURATION": "duration", "T": "time"}.get(param.metavar or "")


def _numeric_options() -> Iterator[tuple[str, str, str]]:
    for path, command in walk(root_command()):
        if getattr(command, "commands", None):
            continue
        for param in command.params:
            names = option_names(param)
            kind = None if not names else _kind(param)
            if kind is not None:
                yield " ".join(path), names[0], kind


NUMERIC_OPTIONS = sorted(_numeric_options())
VALUES = {"int": INTEGERS, "float": FLOATS, "duration": DURATIONS, "time": TIMES}


def test_the_numeric_options_are_all_found() -> None:
    found = {(command, option) for command, option, _ in NUMERIC_OPTIONS}
    assert ("worker", "--lease-seconds") in found
    assert ("result", "--timeout") in found
    assert ("doctor", "--overdue-after") in found
    assert ("runs", "--since") in found
    assert ("worker", "--concurrency") in found
    # A new command with such an option needs its other arguments listed in COMMAND_ARGS.
    assert {command for command, _, _ in NUMERIC_OPTIONS} <= set(COMMAND_ARGS)


@pytest.mark.parametrize(
    ("command", "option", "value"),
    [
        (command, option, value)
        for command, option, kind in NUMERIC_OPTIONS
        for value in VALUES[kind]
    ],
)
def test_absurd_numbers_and_durations_are_exit_2(
    refusing: FlowProject, command: str, option: str, value: str
) -> None:
    args = (*command.split(), *COMMAND_ARGS[command], option, value)
    if command in IN_PROCESS_UNSAFE:
        result = refusing.run(*args, timeout=30)
    else:
        result = refusing.invoke(*args)
    line = result.error_line()
    assert result.code == 2, line
    assert option in line, line
    assert "unexpected" not in line, line


@pytest.mark.parametrize(
    ("args", "line"),
    [
        (
            ("runs", "--since", "999999999999d"),
            "error: --since '999999999999d' is too long; give at most 36525d (100 years).",
        ),
        (
            ("runs", "--idle-for", "inf"),
            "error: --idle-for 'inf' is too long; give at most 36525d (100 years).",
        ),
        (
            ("result", "a", "--wait", "--timeout", "nan"),
            "error: --timeout 'nan' is not a duration; write e.g. 90s, 15m, 2h, 3d or 1h30m.",
        ),
        (
            ("doctor", "--overdue-after", "1e22s"),
            "error: --overdue-after '1e22s' is not a duration; write e.g. 90s, 15m, 2h, 3d or "
            "1h30m.",
        ),
        (
            ("runs", "--until", "0001-01-01T00:00:00+01:00"),
            "error: --until '0001-01-01T00:00:00+01:00' is out of range; give a time between "
            "the years 1 and 9999.",
        ),
        (
            ("runs", "--limit", "99999999999999999999"),
            "error: Invalid value for '--limit': Input should be less than or equal to "
            "1000000000 (see 'flow runs --help')",
        ),
    ],
)
def test_absurd_values_get_one_clear_sentence(
    refusing: FlowProject, args: tuple[str, ...], line: str
) -> None:
    result = refusing.invoke(*args)
    assert (result.code, result.error_line()) == (2, line)


def test_an_infinite_lease_is_refused_before_the_worker_starts(refusing: FlowProject) -> None:
    result = refusing.run("worker", "--lease-seconds", "inf", timeout=30)
    assert (result.code, result.stderr) == (
        2,
        "error: Invalid value for '--lease-seconds': Input should be less than or equal to "
        "86400 (see 'flow worker --help')\n",
    )
