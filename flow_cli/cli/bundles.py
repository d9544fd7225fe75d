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
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

Options = Mapping[str, tuple[Any, Any]]
"""Option name → (its ``Annotated`` type, its default)."""


def bundled(param: str, options: Options, build: Callable[..., Any]) -> Callable[[F], F]:
    """A decorator that adds ``options`` to a command's signature (after its own parameters)
    and calls it with ``param=build(**values)`` instead."""

    def decorate(command: F) -> F:
        signature = inspect.signature(command, eval_str=True)
        own = [p for p in signature.parameters.values() if p.name != param]
        added = [
            inspect.Parameter(
                name, inspect.Parameter.KEYWORD_ONLY, annotation=kind, default=default
            )
            for name, (kind, default) in options.items()
        ]

        @functools.wraps(command)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            values = {name: kwargs.pop(name, default) for name, (_, default) in options.items()}
            return command(*args, **{param: build(**values)}, **kwargs)

        positional = [p for p in own if p.kind is not inspect.Parameter.KEYWORD_ONLY]
        keyword = [p for p in own if p.kind is inspect.Parameter.KEYWORD_ONLY]
        params = (
            [p.replace(kind=inspect.Parameter.POSITIONAL_OR_KEYWORD) for p in positional]
            + [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in keyword]
            + added
        )
        # Typer reads the signature and the annotations: give it the merged ones.
        wrapper.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        del wrapper.__wrapped__
        return wrapper  # type: ignore[return-value]

    return decorate
