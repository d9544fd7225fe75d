"""The command-line reference (``docs/cli.md``), generated from the Typer app.

``scripts/gen_docs.py`` writes it and ``tests/test_docs.py`` checks it is current, the way the
completion scripts are kept in sync: a command or an option cannot be added without the manual
saying so.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from typing import Any

HEADER = """\
# Command-line reference

<!-- Generated from the flow app by scripts/gen_docs.py: do not edit by hand.
     tests/test_docs.py fails when this file is stale. -->

Every command takes the global options before its name (`flow --json runs`), and answers
`--help`. Errors are one `error: ...` line on stderr with exit code 2 for bad input or usage, 1
for an operation that failed, 3 when `flow replay-check` finds a divergence and 130 when
interrupted. A task-oriented tour is in [operations.md](operations.md).
"""


def walk(command: Any, path: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Every command of the app with its path (``("hook", "resolve")``), groups included."""
    yield path, command
    for name in sorted(getattr(command, "commands", {}) or {}):
        sub = command.commands[name]
        if getattr(sub, "hidden", False):
            continue
        yield from walk(sub, (*path, name))


def root_command() -> Any:
    import typer.main

    from flow_cli.cli.app import app

    return typer.main.get_command(app)


def option_names(param: Any) -> list[str]:
    """``["--limit", "-n"]``: the spellings of an option (empty for an argument)."""
    if getattr(param, "param_type_name", "") != "option":
        return []
    return [*param.opts, *param.secondary_opts]


def cli_reference() -> str:
    """The whole of ``docs/cli.md``."""
    root = root_command()
    parts = [HEADER]
    for path, command in walk(root):
        title = " ".join(("flow", *path))
        parts.append(f"\n## `{title}`\n" if path else "\n## Global options\n")
        if path:
            parts.append(f"\n```\n{_usage(title, command)}\n```\n")
            help_text = inspect.cleandoc(command.help or "").replace("\b\n", "")
            if help_text:
                parts.append(f"\n{help_text}\n")
        rows = [
            row
            for param in command.params
            if not getattr(param, "hidden", False) and (row := _row(param)) is not None
        ]
        if rows:
            parts.append("\n| argument / option | meaning |\n| --- | --- |\n")
            parts.extend(f"| {name} | {meaning} |\n" for name, meaning in rows)
        if getattr(command, "commands", None):
            names = ", ".join(
                f"`{' '.join(('flow', *path, n))}`"
                for n in sorted(command.commands)
                if not getattr(command.commands[n], "hidden", False)
            )
            parts.append(f"\nCommands: {names}.\n")
    return "".join(parts)


def _usage(title: str, command: Any) -> str:
    pieces = [title]
    if getattr(command, "commands", None):
        pieces.append("COMMAND")
    if any(getattr(p, "param_type_name", "") == "option" for p in command.params):
        pieces.append("[OPTIONS]")
    for param in command.params:
        if getattr(param, "param_type_name", "") != "argument":
            continue
        name = param.metavar or param.name.upper()
        if param.nargs == -1:
            name += "..."
        pieces.append(name if param.required else f"[{name}]")
    return " ".join(pieces)


def _row(param: Any) -> tuple[str, str] | None:
    kind = getattr(param, "param_type_name", "")
    help_text = " ".join((getattr(param, "help", None) or "").split())
    if kind == "argument":
        name = param.metavar or param.name.upper()
        return f"`{name}`", help_text
    if kind != "option" or param.name == "help":
        return None
    names = ", ".join(option_names(param))
    if not param.is_flag and param.metavar:
        names += f" {param.metavar}"
    elif not param.is_flag:
        names += f" {param.type.name.upper()}"
    meaning = help_text
    envvar = getattr(param, "envvar", None)
    if envvar:
        meaning += f" Environment: `{envvar}`."
    default = param.default
    if (
        param.show_default is not False
        and not param.is_flag
        and default not in (None, (), [])
        and not callable(default)
    ):
        meaning += f" Default: `{default}`."
    return f"`{names.strip()}`".replace("|", "\\|"), meaning.replace("|", "\\|")
