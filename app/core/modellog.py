"""The shared log of runtime model changes (issue 41 part 3): its row and its port.

A replica that loads, swaps or unloads a model appends a ``LoggedChange``; every replica reads
the rows after the last one it has seen (app/wiring/model_sync.py). The log lives in the event
store (``app.rules.store.modelchanges.ModelChangesRepo``); without one (no site file, so no
store) it is ``NoChangeLog`` and each replica's changes stay its own. Here, below both, so that
the store and the composition root share the type without importing each other.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class LoggedChange:
    """One change: ``weights`` relative to the models folder (None for an unload), the SHA-256 of
    the weights and of the models file the replica served (None: no models file), which replica
    made it, and its place in the log (``seq``, given by the store)."""

    at: dt.datetime
    name: str
    action: str  # load / swap / unload
    weights: str | None
    weights_sha256: str | None
    models_file_sha256: str | None
    by: str
    seq: int = 0


class ChangeLog(Protocol):
    enabled: bool

    def append(self, change: LoggedChange) -> int:
        """Store ``change``; the seq it got."""

    def after(self, seq: int, limit: int = 500) -> list[LoggedChange]:
        """The changes after ``seq``, oldest first."""


class NoChangeLog:
    """No event store: nothing is shared."""

    enabled = False

    def append(self, change: LoggedChange) -> int:
        return 0

    def after(self, seq: int, limit: int = 500) -> list[LoggedChange]:
        return []
