"""The ``flow`` command line: global options, the commands, and errors mapped to exit codes.

Start-up cost matters (``flow --help``, ``flow show`` in scripts): this module and the command
modules import only Typer, the standard library and Flow's errors and small helpers. The engine,
the stores and Rich are imported inside the commands that use them; ``main`` builds only the
command that the command line names (``app_for``), and Typer's pydantic coercion is built only
for values that need it (``coercion``). ``tests/test_startup.py`` keeps it so.

Every error leaves as one ``error: ...`` line on stderr and an exit code (see ``exits``), never
a traceback. Set ``FLOW_DEBUG=1`` to get the traceback of an unexpected error instead.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer
from typer.core import TyperGroup

from flow_cli.cli import exits
from flow_cli.cli.coercion import defer_adapters
from flow_cli.cli.io import check_arguments, one_line
from flow_cli.cli.options import text_option
from flow_cli.cli.state import CliState
from flow_cli.errors import FlowError


class FlowGroup(TyperGroup):
    """The root command: runs the app and turns every failure into one line and an exit code."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        if os.environ.get("_FLOW_COMPLETE"):
            from flow_cli.cli.completion import enable

            enable()

        defer_adapters(self)

        def invoke() -> Any:
            check_arguments(sys.argv[1:] if args is None else args)
            return super(FlowGroup, self).main(
                args,
                prog_name or "flow",
                complete_var,
                standalone_mode=False,
                windows_expand_args=windows_expand_args,
                **extra,
            )

        code = run_guarded(invoke)
        if standalone_mode:
            sys.exit(code)
        return code


def run_guarded(invoke: Callable[[], Any]) -> int:
    """Call ``invoke`` and map what escapes it to an exit code, printing one line on stderr."""
    from flow_cli.cli import logs

    logs.HANDLER.json = False  # every invocation starts in text; --log-format json turns it on
    try:
        result = invoke()
    except FlowError as error:
        return _fail(str(error), exits.exit_code(error))
    except typer.Exit as done:
        return done.exit_code
    except typer.Abort:
        return _fail("aborted", exits.FAILED)
    except typer.TyperException as error:  # usage errors from the argument parser
        code = getattr(error, "exit_code", exits.USAGE)
        if type(error).__name__ == "NoArgsIsHelpError":
            sys.stdout.write(error.format_message() + "\n")
            return exits.OK
        hint = ""
        context = getattr(error, "ctx", None)
        if context is not None:
            hint = f" (see '{context.command_path} --help')"
        # Typer validates through pydantic, whose messages start with "Value error, ".
        message = error.format_message().replace("Value error, ", "")
        return _fail(message + hint, code)
    except KeyboardInterrupt:
        return exits.INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return exits.FAILED
    except Exception as error:
        if os.environ.get("FLOW_DEBUG"):
            raise
        return _fail(
            f"unexpected {type(error).__name__}: {error} (set FLOW_DEBUG=1 for the traceback)",
            exits.FAILED,
        )
    if isinstance(result, int) and not isinstance(result, bool):
        return result  # typer.Exit raised inside a command comes back as its code
    return exits.OK


def _fail(message: str, code: int) -> int:
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
    from flow_cli.cli import logs

    if logs.HANDLER.json:  # `flow worker|tick --log-format json`: the error is a JSON line too
        logs.say(one_line(message), "command_failed", "error", exit_code=code)
    else:
        sys.stderr.write(f"error: {one_line(message)}\n")
    sys.stderr.flush()
    return code


def _silence_stdout() -> None:
    """After EPIPE, point stdout at devnull so the interpreter's final flush stays quiet."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _version(value: bool) -> None:
    if value:
        from flow_cli import __version__

        sys.stdout.write(f"flow {__version__}\n")
        raise typer.Exit(exits.OK)


def main_options(
    ctx: typer.Context,
    db: Annotated[
        str | None,
        text_option(
            "--db",
            "URL",
            "Database: sqlite:///PATH, postgresql://..., or memory://. "
            "Default: flow.toml's database, else sqlite:///<user data dir>/flow/flow.db.",
            envvar="FLOW_DB",
        ),
    ] = None,
    config: Annotated[
        Path | None,
        text_option(
            "--config",
            "PATH",
            "Config file (default: ./flow.toml; a missing default file is fine).",
            envvar="FLOW_CONFIG",
            dir_okay=False,
        ),
    ] = None,
    json_output: Annotated[
        bool, typer.Option("--json", help="JSON output for every command that supports it.")
    ] = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Print the version and exit."
        ),
    ] = False,
) -> None:
    """Flow: durable workflows on one SQLite file or PostgreSQL."""
    ctx.obj = CliState(db=db, config_option=config, json=json_output)


# In the order `flow --help` lists them: (name, module in flow_cli.cli, attribute). An attribute
# that is a ``typer.Typer`` is a group and stands for its subcommands. Modules are named, not
# imported, so that a command line imports only the module of the command it names.
_COMMANDS: tuple[tuple[str, str, str], ...] = (
    ("init", "cmd_init", "init"),
    ("start", "cmd_facts", "start"),
    ("tick", "cmd_drive", "tick"),
    ("worker", "cmd_drive", "worker"),
    ("signal", "cmd_bulk", "signal_runs"),
    ("query", "cmd_talk", "query"),
    ("update", "cmd_talk", "update"),
    ("hook", "cmd_hook", "hook_app"),
    ("step", "cmd_step", "step_app"),
    ("cancel", "cmd_bulk", "cancel"),
    ("terminate", "cmd_bulk", "terminate"),
    ("retry", "cmd_bulk", "retry"),
    ("pause", "cmd_pause", "pause"),
    ("resume", "cmd_pause", "resume"),
    ("pauses", "cmd_pause", "pauses"),
    ("runs", "cmd_triage", "runs"),
    ("count", "cmd_triage", "count"),
    ("show", "cmd_read", "show"),
    ("history", "cmd_read", "history"),
    ("result", "cmd_wait", "result"),
    ("execute", "cmd_wait", "execute"),
    ("fork", "cmd_fork", "fork"),
    ("upgrade", "cmd_upgrade", "upgrade"),
    ("export", "cmd_bulk", "export"),
    ("replay-check", "cmd_replay", "replay_check"),
    ("prune", "cmd_retention", "prune"),
    ("archive", "cmd_retention", "archive_app"),
    ("workers", "cmd_fleet", "workers"),
    ("doctor", "cmd_fleet", "doctor"),
    ("top", "cmd_top", "top"),
    ("builds", "cmd_fleet", "builds"),
    ("check", "cmd_check", "check"),
    ("schedule", "cmd_schedule", "schedule_app"),
    ("limits", "cmd_limits", "limits_app"),
    ("completion", "cmd_completion", "completion_app"),
)


def _register(target: typer.Typer, name: str, module: str, attribute: str) -> None:
    entry = getattr(importlib.import_module(f"flow_cli.cli.{module}"), attribute)
    if isinstance(entry, typer.Typer):
        target.add_typer(entry, name=name)
    else:
        target.command(name)(entry)


def _root() -> typer.Typer:
    """The root command with its options and no subcommand."""
    root = typer.Typer(
        name="flow",
        cls=FlowGroup,
        help="Flow: durable workflows on one SQLite file or PostgreSQL.\n\n"
        "Runs are append-only event histories; `flow tick` or `flow worker` decides them with "
        "the workflow code that flow.toml's runtimes name.",
        epilog=exits.HELP,
        add_completion=False,
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    root.callback()(main_options)
    return root


def _whole_app() -> typer.Typer:
    whole = _root()
    for entry in _COMMANDS:
        _register(whole, *entry)
    return whole


_APP: typer.Typer | None = None


def __getattr__(name: str) -> typer.Typer:
    """``app``: the root with every command, built (and its modules imported) on first use."""
    global _APP
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if _APP is None:
        _APP = _whole_app()
    return _APP


_GLOBAL_OPTIONS = {"--db": True, "--config": True, "--json": False}
"""The root's options that may come before the command name, and whether they take a value."""


def _command_name(args: Sequence[str]) -> str | None:
    """The command that ``args`` names after the global options, or None (help, version, or
    anything unusual: those get the whole app)."""
    index = 0
    while index < len(args):
        arg = args[index]
        name, equals, _ = arg.partition("=")
        if name in _GLOBAL_OPTIONS:
            index += 1 if equals or not _GLOBAL_OPTIONS[name] else 2
            continue
        return None if arg.startswith("-") else arg
    return None


def app_for(args: Sequence[str]) -> typer.Typer:
    """The whole ``app``, or, when ``args`` name one of its commands, a root that registers that
    command alone (and imports only its module).

    Typer turns every registered command into a Click command before it parses anything, and
    the command modules import what their commands need; a command's own help, usage and errors
    do not depend on its siblings. A name that is no command (a typo) gets the whole app, which
    suggests the close ones.
    """
    if os.environ.get("_FLOW_COMPLETE"):
        return __getattr__("app")
    if list(args) == ["--version"]:  # answered while the root's options are parsed
        return _root()
    name = _command_name(args)
    chosen = [entry for entry in _COMMANDS if entry[0] == name]
    if not chosen:
        return __getattr__("app")
    lean = _root()
    _register(lean, *chosen[0])
    return lean


def main(argv: Sequence[str] | None = None) -> int:
    """The ``flow`` console script. Returns the exit code when ``argv`` is given (tests)."""
    command = typer.main.get_command(app_for(sys.argv[1:] if argv is None else argv))
    code: int = command.main(
        args=list(argv) if argv is not None else None, prog_name="flow", standalone_mode=False
    )
    if argv is None:
        sys.exit(code)
    return code
