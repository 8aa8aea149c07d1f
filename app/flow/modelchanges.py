"""What the ``ModelSwitch`` tells the rest of the service after a runtime change (issue 41).

The switch only orders the steps of a load, swap or unload (app/flow/modelswap.py); parts that
must follow a change are its observers, given by the composition root: the shadow reference
rebuilt from the default model's new weights (app/wiring/shadow_follow.py), the change written
to the shared event store for the other replicas (app/wiring/model_sync.py). An observer runs
after the change is made, on the caller's thread, while the name is still held (no other change
of it can start); its failure is logged and never undoes the change. Without observers:
``NoSwitchObserver``.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any, Protocol

from app.inference.modelset import ServedModel

log = logging.getLogger("campusguard.models")


@dataclasses.dataclass(frozen=True, slots=True)
class ModelChange:
    """One change made: ``load`` (``before`` None), ``swap`` (both), ``unload`` (``after`` None)."""

    action: str
    name: str
    before: ServedModel | None
    after: ServedModel | None


class SwitchObserver(Protocol):
    def changed(self, change: ModelChange) -> None:
        """``change`` was made (traffic has moved already)."""


class NoSwitchObserver:
    """Nothing follows the changes."""

    def changed(self, change: ModelChange) -> None:
        return None


class ReplicaSync(Protocol):
    """How this replica follows the other replicas' changes (app/wiring/model_sync.py): ``GET /models``'s ``sync``."""

    def report(self) -> dict[str, Any]: ...


class NoReplicaSync:
    """Tools and tests without the composition root: changes are this process's own."""

    def report(self) -> dict[str, Any]:
        return {"enabled": False}


class SwitchObservers:
    """Several observers in order; one that fails is logged and the next still runs."""

    def __init__(self, observers: Sequence[SwitchObserver]) -> None:
        self.observers = tuple(observers)

    def changed(self, change: ModelChange) -> None:
        for observer in self.observers:
            try:
                observer.changed(change)
            except Exception:  # noqa: BLE001 - the change is made; a follower's failure must not undo it
                log.exception("model %s: %s after the %s failed", change.name, type(observer).__name__,
                              change.action)
