"""``flow init``: write a commented ``flow.toml``."""

from __future__ import annotations

from typing import Annotated

import typer

from flow_cli.cli.config import config_path, render_init
from flow_cli.cli.io import out
from flow_cli.cli.options import text_option
from flow_cli.cli.state import CliState
from flow_cli.errors import FlowError, InputError


def init(
    ctx: typer.Context,
    database: Annotated[
        str,
        typer.Option(
            "--database",
            metavar="URL",
            help="Database URL to record (a relative sqlite:/// path is next to flow.toml).",
        ),
    ] = "sqlite:///flow.db",
    runtimes: Annotated[
        list[str] | None,
        text_option(
            "--runtime", "MODULE:ATTR", "A Runtime to host, e.g. shop.flows:runtime (repeatable)."
        ),
    ] = None,
    build_id: Annotated[
        str | None,
        text_option("--build-id", "B", "The build new runs start under."),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing file.")] = False,
) -> None:
    """Write a commented flow.toml.

    The file goes to --config (default ./flow.toml). Refuses to overwrite an existing file
    unless --force is given.
    """
    state = CliState.of(ctx)
    path, _ = config_path(state.config_option)
    if path.is_dir():
        raise InputError(f"{path} is a directory; pass --config PATH/flow.toml.")
    if path.exists() and not force:
        raise InputError(f"{path} already exists; pass --force to overwrite it.")
    text = render_init(database, build_id, runtimes or [])
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise FlowError(f"Cannot write {path}: {exc.strerror or exc}.") from None
    out(f"wrote {path}")
