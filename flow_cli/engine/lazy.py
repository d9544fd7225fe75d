"""``Lazy``: a part of the engine made on first use, once.

An engine that only reads, as `flow show` does, never needs its decider, step executor or
schedule service, nor the workflow machinery they import: each is made when first asked for.
Threads may ask at once (a web server's starts), so the first makes it under a lock and the
others wait for that one instead of making their own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Generic, TypeVar

T = TypeVar("T")


class Lazy(Generic[T]):
    """A value ``make`` makes the first time ``get`` is called."""

    def __init__(self, make: Callable[[], T]) -> None:
        self._make = make
        # One lock each: making one part may ask for another (the executor needs the decider).
        self._lock = threading.Lock()
        self.made: T | None = None
        """The value once made; ``None`` until then (nothing to close or count yet)."""

    def get(self) -> T:
        made = self.made
        if made is None:
            with self._lock:
                if self.made is None:
                    self.made = self._make()
                made = self.made
        return made
