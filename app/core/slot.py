"""``Slot``: a part that arrives after the app is built, read where it is used.

Most parts are built before the app serves and handed over finished. A few arrive later, on
their own schedule: the engine once the model is loaded and warm, the shadow lane once its
reference is loaded, the audit trail and the rules once the lifespan opened the event store.
Whoever reads them holds the slot (typed, with a null default: ``None`` for the engine while
loading, ``NoShadow``, ``NoAudit``, ``NoRules``) and reads it per use; the composition root
(app/main.py, app/wiring) is the only writer. So nothing patches an attribute of a part to
hand it a late collaborator, and a reader never guesses with ``getattr(..., None)``.
"""

from __future__ import annotations

from typing import Generic, TypeVar

T = TypeVar("T")


class Slot(Generic[T]):
    def __init__(self, initial: T) -> None:
        self._value = initial

    def get(self) -> T:
        return self._value

    def put(self, value: T) -> None:
        """Fill (or replace) the slot; readers see the new part from their next ``get``."""
        self._value = value

    def __repr__(self) -> str:
        return f"Slot({self._value!r})"
