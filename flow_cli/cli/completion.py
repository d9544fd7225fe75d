"""Shell completion scripts, generated from the app by Typer's completion machinery.

A script asks ``flow`` itself for candidates at completion time (``_FLOW_COMPLETE=complete_bash
flow ...``), so commands and options never go stale in it; ``scripts/gen_completions.py`` writes
``completions/flow.{bash,zsh,fish}`` and ``tests/test_completions.py`` checks they are current.
"""

from __future__ import annotations

from typing import Any

PROG_NAME = "flow"
COMPLETE_VAR = "_FLOW_COMPLETE"
SHELLS = ("bash", "zsh", "fish")


def enable() -> None:
    """Register Typer's completion classes (what ``complete_bash`` and friends answer with)."""
    # Typer keeps these in a private module; it is the same call its --install-completion makes.
    from typer._completion_classes import completion_init

    completion_init()


def completion_script(shell: str, command: Any) -> str:
    """The completion script for ``shell`` (bash, zsh or fish) of the Click ``command`` that
    ``flow`` runs (``typer.main.get_command(app)``, or the root of a running command's
    context), ending with a newline."""
    from typer._click.shell_completion import get_completion_class

    enable()
    cls = get_completion_class(shell)
    if cls is None or shell not in SHELLS:
        raise ValueError(f"no completion for shell {shell!r}; choose one of {', '.join(SHELLS)}")
    return cls(command, {}, PROG_NAME, COMPLETE_VAR).source().strip() + "\n"
