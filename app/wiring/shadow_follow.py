"""The shadow reference follows a swap of the default model (issue 41, docs/shadow.md).

The reference is built at startup from CAMPUSGUARD_SHADOW_WEIGHTS, or, when that is not set,
from the default model's weights: the lane then measures how far the served runtime and
precision stray from fp32 of *the same* weights. After ``PUT /admin/models/{default}`` those
are other weights, so ``ShadowFollower`` (an observer of the ``ModelSwitch``) rebuilds it:

- CAMPUSGUARD_SHADOW_WEIGHTS not set: a new reference is loaded from the new weights on a thread
  at low priority (nice +10, as the swap loads its engine), run once, and put in the app's shadow
  slot; the old lane is stopped (its reference closed). The new lane starts an empty agreement
  book: figures of the old weights say nothing of the new ones. Logged and audited
  (``shadow.reference``, actor ``system:model.swap``, the weights before and after). A reference
  that cannot load turns the lane off (``NoShadow``: comparing against the old weights would be
  wrong), logged as an error and audited ``refused``;
- CAMPUSGUARD_SHADOW_WEIGHTS set: the operator chose the reference; it stays, and the lane keeps
  comparing the new primary against it (logged). Its idle check reads the engine behind the
  default's name at every check (``serving_default``), so it waits for the new engine to be idle,
  never reads the old one, drained and freed.

Swaps of other models, loads and unloads do not touch the reference: it shadows the default.
"""

from __future__ import annotations

import logging

from app.api.state import AppState
from app.config import Settings
from app.core.audit import AuditEntry
from app.core.errors import ConfigError
from app.core.metrics import Metrics
from app.flow.modelchanges import ModelChange
from app.flow.modelswap import low_priority
from app.inference.shadow.lane import NoShadow
from app.wiring.shadow import build_shadow, serving_default

log = logging.getLogger("campusguard.shadow")


class ShadowFollower:
    """``SwitchObserver``: rebuild the reference after a swap of the default model (module docstring)."""

    def __init__(self, settings: Settings, state: AppState, metrics: Metrics) -> None:
        self.settings, self.state, self.metrics = settings, state, metrics

    def changed(self, change: ModelChange) -> None:
        if change.action != "swap" or change.name != self.state.models.default or not self.settings.shadow_backend:
            return
        assert change.before is not None and change.after is not None  # a swap has both
        old_weights, new_weights = change.before.weights, change.after.weights
        if self.settings.shadow_weights is not None:
            log.info("model %s now serves %s; the shadow reference stays %s (CAMPUSGUARD_SHADOW_WEIGHTS)",
                     change.name, new_weights.name, self.settings.shadow_weights)
            return
        engine = change.after.slot.get()
        if engine is None:
            return
        own = self.settings.model_copy(update={"weights": new_weights})
        old = self.state.shadow.get()
        try:
            lane = low_priority(lambda: build_shadow(own, engine, self.metrics, serving_default(self.state.models)))
        except ConfigError as exc:
            log.error("model %s: the shadow reference could not follow the swap to %s, so the shadow lane is off "
                      "until the next swap or restart: %s", change.name, new_weights.name, exc.message)
            self.state.shadow.put(NoShadow())
            old.stop()
            self._audit(change.name, old_weights.name, "refused")
            return
        lane.start()
        self.state.shadow.put(lane)
        old.stop()
        log.warning("model %s: the shadow reference now runs %s (was %s); its agreement book restarted",
                    change.name, new_weights.name, old_weights.name)
        self._audit(change.name, old_weights.name, "ok", new_weights.name)

    def _audit(self, name: str, before: str, outcome: str, after: str | None = None) -> None:
        self.state.gate.audit.get().record(AuditEntry(actor="system:model.swap", action="shadow.reference",
                                                      target=name, outcome=outcome, before=before, after=after))
