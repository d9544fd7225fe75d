"""``flow completion show|install [SHELL]``: the shell completion script, printed or installed.

The script is what ``completions/flow.<shell>`` holds (``flow_cli.cli.completion``); it calls
``flow`` back for candidates, so an installed script never goes stale when Flow is upgraded.
``install`` writes it where each shell looks for completions of its own accord (bash-completion's
user directory, fish's completions directory), or, for zsh, into a directory to put on ``fpath``.
"""

from __future__ import annotations

import os
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from flow_cli.cli.io import note, out
from flow_cli.cli.options import text_argument, text_option
from flow_cli.errors import InputError

completion_app = typer.Typer(
    name="completion",
    help="Shell completion for flow: print the script, or install it for your shell.",
    no_args_is_help=True,
    rich_markup_mode=None,
)


class Shell(StrEnum):
    BASH = "bash"
    ZSH = "zsh"
    FISH = "fish"


ShellArg = Annotated[
    Shell | None,
    text_argument("[SHELL]", "bash, zsh or fish (default: the shell named by $SHELL)."),
]

ZSH_SETUP = "fpath=({directory} $fpath); autoload -Uz compinit; compinit"


def _shell(shell: Shell | None) -> Shell:
    if shell is not None:
        return shell
    name = Path(os.environ.get("SHELL", "")).name
    try:
        return Shell(name)
    except ValueError:
        raise InputError(
            f"cannot tell the shell from $SHELL ({name or 'not set'}); name it: "
            "flow completion install bash|zsh|fish."
        ) from None


def target(shell: Shell) -> Path:
    """Where ``install`` writes the script for ``shell``."""
    home = Path.home()
    data = Path(os.environ.get("XDG_DATA_HOME") or home / ".local" / "share")
    config = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    if shell is Shell.BASH:
        return data / "bash-completion" / "completions" / "flow"
    if shell is Shell.FISH:
        return config / "fish" / "completions" / "flow.fish"
    return home / ".zfunc" / "_flow"


@completion_app.command("show")
def show(ctx: typer.Context, shell: ShellArg = None) -> None:
    """Print the completion script for SHELL (to save it where you like).

    bash: flow completion show bash > ~/.local/share/bash-completion/completions/flow, or
    eval "$(flow completion show bash)" in ~/.bashrc. zsh: save it as _flow in a directory on
    fpath. fish: flow completion show fish > ~/.config/fish/completions/flow.fish.
    """
    from flow_cli.cli.completion import completion_script

    out(completion_script(_shell(shell).value, ctx.find_root().command).rstrip("\n"))


@completion_app.command("install")
def install(
    ctx: typer.Context,
    shell: ShellArg = None,
    path: Annotated[
        Path | None,
        text_option(
            "--path",
            "FILE",
            "Write the script here instead of the shell's usual place.",
            dir_okay=False,
        ),
    ] = None,
) -> None:
    """Install the completion script for SHELL where the shell finds it.

    bash: ~/.local/share/bash-completion/completions/flow (loaded by bash-completion in new
    shells). fish: ~/.config/fish/completions/flow.fish. zsh: ~/.zfunc/_flow, plus a line to
    add to ~/.zshrc, printed. $XDG_DATA_HOME and $XDG_CONFIG_HOME are honoured. Running it again
    rewrites the file (after a Flow upgrade, nothing needs doing: the script asks flow itself).
    """
    from flow_cli.cli.completion import completion_script
    from flow_cli.cli.export_files import write_file

    chosen = _shell(shell)
    where = path if path is not None else target(chosen)
    try:
        where.expanduser().parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create {where.parent}: {exc.strerror or exc}.") from None
    write_file(where, completion_script(chosen.value, ctx.find_root().command))
    out(f"wrote the {chosen.value} completion script to {where}")
    if chosen is Shell.ZSH:
        note(
            "to load it, add this line to ~/.zshrc (before any other compinit): "
            + ZSH_SETUP.format(directory=where.expanduser().parent)
        )
    elif chosen is Shell.BASH:
        note("it is loaded in new shells (needs the bash-completion package)")
    else:
        note("it is loaded in new fish shells")
