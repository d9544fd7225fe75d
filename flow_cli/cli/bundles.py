"""``bundled``: options shared by several commands, given to each as one value.

Typer reads a command's signature; a group of options that several commands take (the run
filters, a schedule's definition) is written once, as a table of ``name: (annotation,
default)``, and added to each command's signature by a decorator. The command receives them
built into one value (``filters: FilterArgs``), not as a dozen parameters of its own.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar

import typer

F = TypeVar("F", bound=Callable[..., Any])

Options = Mapping[str, tuple[Any, Any]]
"""Option name → (its ``Annotated`` type, its default)."""


def text_option(
    flag: str, metavar: str, help: str, *, short: str | None = None, **extra: Any
) -> Any:
    """An option that takes a value and has no default worth showing (most of Flow's):
    ``name: Annotated[str | None, text_option("--id", "ID", "...")] = None``; ``short`` is a
    one-letter alias (``-o``), ``extra`` goes to ``typer.Option`` as it is (``envvar`` ...).
    Kept here, below ``options``, so that the option tables (``filters``) can use it too."""
    flags = (flag,) if short is None else (flag, short)
    return typer.Option(*flags, metavar=metavar, help=help, show_default=False, **extra)


def optional_text(flag: str, metavar: str, help: str) -> tuple[Any, None]:
    """A row of an ``Options`` table: an option taking one text value, ``None`` when not
    given (most filters and schedule options are)."""
    return Annotated[str | None, text_option(flag, metavar, help)], None


def bundled(param: str, options: Options, build: Callable[..., Any]) -> Callable[[F], F]:
    """A decorator that puts ``options`` in a command's signature where it declares ``param``
    (of that parameter's kind, so ``*, filters: FilterArgs`` adds keyword-only options at the
    end) and calls it with ``param=build(**values)`` instead."""

    def decorate(command: F) -> F:
        signature = inspect.signature(command, eval_str=True)
        params: list[inspect.Parameter] = []
        for own in signature.parameters.values():
            if own.name != param:
                params.append(own)
                continue
            params += [
                inspect.Parameter(name, own.kind, annotation=kind, default=default)
                for name, (kind, default) in options.items()
            ]

        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            values = {name: kwargs.pop(name, default) for name, (_, default) in options.items()}
            return command(*args, **{param: build(**values)}, **kwargs)

        # Typer reads the signature and the annotations: give it the merged ones.
        wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        del wrapper.__wrapped__
        return wrapper  # type: ignore[return-value]

    return decorate
