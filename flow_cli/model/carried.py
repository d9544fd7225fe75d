"""Building one record from another that names its fields alike: the state an event opens in
the snapshot, the event a command adds to history, a state with a few fields changed.

Those records repeat each other's fields on purpose (history keeps what the command asked for;
the snapshot keeps what history recorded), so each field is carried over by its name here
rather than listed again at every place one record is made from the other.

Both builders run for nearly every event a worker folds (a state is made or replaced per
event), and a frozen dataclass's ``__init__`` sets each of its fields through
``object.__setattr__``: for ``StepState``'s 23 fields that is most of a step's snapshot cost.
For a frozen slots dataclass without ``__post_init__``, ``__init__`` does nothing but set its
fields, so the builders set them straight through the slots' descriptors, in code generated
once per pair of types (as ``dataclasses`` generates ``__init__``). The result is the same
record ``kind(...)`` or ``dataclasses.replace`` would make, and the same ``TypeError`` for a
missing, unknown or doubly given field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields, replace
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_R = TypeVar("_R", bound="DataclassInstance")

_Builder = Callable[[Any, dict[str, Any]], Any]


def carried(kind: type[_R], source: DataclassInstance, **more: Any) -> _R:
    """A ``kind`` whose fields that ``source`` also has take ``source``'s values; ``more``
    gives the rest (a field in both is a ``TypeError``: nothing is overridden silently)."""
    built: _R = _carrier(kind, type(source))(source, more)
    return built


def replaced(record: _R, **changes: Any) -> _R:
    """``dataclasses.replace(record, **changes)``, without its per-call overhead for the
    frozen slots records the snapshot replaces at every event."""
    built: _R = _replacer(type(record))(record, changes)
    return built


def _direct(kind: type[DataclassInstance]) -> bool:
    """Whether ``kind``'s ``__init__`` only sets its fields: its slots may be set directly."""
    params = getattr(kind, "__dataclass_params__", None)
    return (
        "__slots__" in kind.__dict__
        and params is not None
        and params.frozen
        and not hasattr(kind, "__post_init__")
        and all(f.init for f in fields(kind))
    )


@cache
def _carrier(kind: type[DataclassInstance], source: type[DataclassInstance]) -> _Builder:
    theirs = {f.name for f in fields(source)}
    shared = tuple(f.name for f in fields(kind) if f.name in theirs)
    if not _direct(kind):

        def build(record: Any, more: dict[str, Any]) -> Any:
            return kind(**{name: getattr(record, name) for name in shared}, **more)

        return build
    rest = [f for f in fields(kind) if f.name not in theirs]
    lines = [
        "def build(source, more):",
        "    if more.keys() & SHARED or more.keys() - REST:",
        "        raise TypeError(wrong(more))",
        "    new = new_record(KIND)",
        *(f"    set_{name}(new, source.{name})" for name in shared),
    ]
    names: dict[str, Any] = {}
    for f in rest:
        if f.default is not MISSING:
            names[f"default_{f.name}"] = f.default
            value = f"more.get({f.name!r}, default_{f.name})"
        elif f.default_factory is not MISSING:
            names[f"factory_{f.name}"] = f.default_factory
            value = f"more[{f.name!r}] if {f.name!r} in more else factory_{f.name}()"
        else:
            value = f"more[{f.name!r}] if {f.name!r} in more else missing({f.name!r})"
        lines.append(f"    set_{f.name}(new, {value})")
    lines.append("    return new")

    def wrong(more: Mapping[str, Any]) -> str:
        doubled = sorted(more.keys() & set(shared))
        if doubled:
            return f"{kind.__name__}: {', '.join(doubled)} given twice (carried and given)"
        unknown = sorted(more.keys() - {f.name for f in rest})
        return f"{kind.__name__} has no field {', '.join(unknown)}"

    def missing(name: str) -> Any:
        raise TypeError(f"{kind.__name__} needs {name!r}")

    return _compiled(
        kind,
        "\n".join(lines),
        SHARED=frozenset(shared),
        REST=frozenset(f.name for f in rest),
        wrong=wrong,
        missing=missing,
        **names,
    )


@cache
def _replacer(kind: type[DataclassInstance]) -> _Builder:
    if not _direct(kind):
        return lambda record, changes: replace(record, **changes)
    every = tuple(f.name for f in fields(kind))
    lines = [
        "def build(source, changes):",
        "    new = new_record(KIND)",
        *(f"    set_{name}(new, source.{name})" for name in every),
        "    try:",
        "        for name, value in changes.items():",
        "            SETTERS[name](new, value)",
        "    except KeyError:",
        "        raise TypeError(f'{KIND.__name__} has no field {name!r}') from None",
        "    return new",
    ]
    return _compiled(kind, "\n".join(lines), SETTERS={name: _setter(kind, name) for name in every})


def _compiled(kind: type[DataclassInstance], source: str, **names: Any) -> _Builder:
    scope: dict[str, Any] = {
        "KIND": kind,
        "new_record": object.__new__,
        **{f"set_{f.name}": _setter(kind, f.name) for f in fields(kind)},
        **names,
    }
    exec(source, scope)  # the source is built above from the dataclass's own field names
    builder: _Builder = scope["build"]
    return builder


def _setter(kind: type[DataclassInstance], name: str) -> Callable[[Any, Any], None]:
    # A slot's descriptor sets it without the frozen class's __setattr__ (which refuses).
    setter: Callable[[Any, Any], None] = getattr(kind, name).__set__
    return setter
