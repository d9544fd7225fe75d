"""Building one record from another that names its fields alike: the state an event opens in
the snapshot, the event a command adds to history.

Those records repeat each other's fields on purpose (history keeps what the command asked for;
the snapshot keeps what history recorded), so each field is carried over by its name here
rather than listed again at every place one record is made from the other.
"""

from __future__ import annotations

from dataclasses import fields
from functools import cache
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_R = TypeVar("_R", bound="DataclassInstance")


def carried(kind: type[_R], source: DataclassInstance, **more: Any) -> _R:
    """A ``kind`` whose fields that ``source`` also has take ``source``'s values; ``more``
    gives the rest (a field in both is a ``TypeError``: nothing is overridden silently)."""
    values = {name: getattr(source, name) for name in _shared(kind, type(source))}
    return kind(**values, **more)


@cache
def _shared(kind: type[DataclassInstance], source: type[DataclassInstance]) -> tuple[str, ...]:
    # Worked out once per pair of types: the snapshot makes a state for every event it folds.
    theirs = {f.name for f in fields(source)}
    return tuple(f.name for f in fields(kind) if f.name in theirs)
