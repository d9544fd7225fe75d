"""Parameter coercion without pydantic on the paths that do not need it.

Typer 0.29 coerces each parameter through a pydantic ``TypeAdapter`` that it builds the first
time the parameter is parsed, even when the value is missing (``None``), which needs no
coercion at all. Importing pydantic and building the adapters costs ~100 ms, more than the rest
of ``flow show``. ``defer_adapters`` gives every parameter of a command tree a stand-in that
returns a plain string, a list of plain strings, an empty list, a plain number within the
option's bounds (``--limit 50``) or a checked ``Path`` (``--config``, ``-o DIR``) as Typer's
adapters would, and builds Typer's own coercion the first time another value arrives. The
coercion, the messages of a bad value and the help stay Typer's own.

With a Typer that has no such per-parameter coercion (before 0.29), nothing changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, get_args, get_origin

try:
    from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
    from typer._param_types import coerce_cli_path
except ImportError:  # pragma: no cover - Typer before 0.29 coerces through Click types
    RuntimeParam = None  # type: ignore[assignment,misc]


if RuntimeParam is not None:

    @dataclass(frozen=True)
    class _Deferred(RuntimeParam):
        """Typer's coercion of one parameter, built on the first value that needs it."""

        descriptor: TypeDescriptor
        built: list[RuntimeParam] = field(default_factory=list)

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            annotation: Any = self.annotation
            if self.parameter_info.parser is None:
                if annotation is str and type(value) is str:
                    return value  # Typer's str adapter returns a str as it is
                if (
                    get_origin(annotation) is list
                    and type(value) in (list, tuple)
                    and (not value or get_args(annotation) == (str,))
                    and all(type(item) is str for item in value)
                ):
                    return list(value)  # what Typer's list adapter makes of no value or strs
                if annotation is int and type(value) is str and _in_bounds(value, self):
                    return int(value)  # Typer's int adapter: the number, once in bounds
                if (
                    annotation is Path
                    and type(value) is str
                    and value
                    and self.parameter_info.path_type is None
                ):
                    # Typer's path adapter makes the Path with pydantic, then checks it (exists,
                    # file or directory, readable ...) in coerce_cli_path: the same checks and
                    # messages, given the Path.
                    return coerce_cli_path(
                        Path(value), self.parameter_info, path_type=Path, param=param, ctx=ctx
                    )
            if not self.built:
                self.built.append(build_runtime_param(self.descriptor))
            return self.built[0].coerce(value, param=param, ctx=ctx)


def _in_bounds(text: str, runtime: Any) -> bool:
    """Whether ``text`` is plain ASCII digits whose number lies in the parameter's ``min`` /
    ``max`` (without ``clamp``): anything else (a sign, a space, a number out of bounds) goes
    to Typer's own coercion, which says what is wrong with it."""
    if not (text.isascii() and text.isdigit()):
        return False
    info = runtime.parameter_info
    if getattr(info, "clamp", False):
        return False
    number = int(text)
    low, high = getattr(info, "min", None), getattr(info, "max", None)
    return (low is None or number >= low) and (high is None or number <= high)


def defer_adapters(command: Any, help_names: list[str] | None = None) -> None:
    """Give each parameter of ``command`` and its subcommands a deferred coercion (once).

    The help option each command makes for itself is included (``help_names``: the root's
    ``help_option_names``, which the subcommands' contexts inherit). This leans on Typer's
    private ``_coercion`` module: if a later Typer shapes it otherwise, the command keeps
    Typer's own coercion (start-up is slower, nothing else changes).
    """
    if RuntimeParam is None or getattr(command, "_flow_deferred", False):
        return
    try:
        _defer(command, help_names)
    except Exception:  # an optimisation only: Typer's coercion stays in place
        return


def _defer(command: Any, help_names: list[str] | None) -> None:
    settings = getattr(command, "context_settings", None) or {}
    names = settings.get("help_option_names", help_names or ["--help"])
    params = list(command.params)
    get_help_option = getattr(command, "get_help_option", None)
    if get_help_option is not None:
        help_option = get_help_option(SimpleNamespace(help_option_names=names))
        if help_option is not None:
            params.append(help_option)
    for param in params:
        descriptor = getattr(param, "type_descriptor", None)
        if isinstance(descriptor, TypeDescriptor) and getattr(param, "_runtime_param", 0) is None:
            param._runtime_param = _Deferred(
                parameter_info=descriptor.parameter_info,
                annotation=descriptor.annotation,
                descriptor=descriptor,
            )
    command._flow_deferred = True
    for sub in (getattr(command, "commands", None) or {}).values():
        if not getattr(sub, "_flow_deferred", False):
            _defer(sub, names)
