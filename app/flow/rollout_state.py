"""A rollout's record, its settings, its refusals and the judgement of one window (app/flow/rollout.py).

``judge`` is the whole rule, in one place: a window with fewer than ``min_frames`` compared
frames says nothing (a window that never fills never promotes); one with enough fails when
the candidate agrees less than the floor with the current model (same classes only), fails
more often per frame than the current model by more than ``max_error_ratio``, or is slower
(p50 of the engine's inference time) by more than ``max_latency_ratio``; otherwise it passes.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

from app.core.errors import InvalidParameter, ServiceError
from app.core.timeutil import iso
from app.inference.shadow.candidate import Window

PHASES = ("shadow", "canary", "promoted", "rolled_back")
OUTCOMES = ("promoted", "rolled_back", "aborted")
HISTORY = 720  # evaluation points kept per rollout: 12 minutes at one a second (two 5-minute windows and more)


class RolloutInProgress(ServiceError):
    """A rollout of this model is running already."""

    status, code = 409, "rollout_in_progress"


class NoRollout(ServiceError):
    """No rollout of this model has run since the service started."""

    status, code = 404, "no_rollout"


class RolloutPhaseConflict(ServiceError):
    """The rollout is not in a phase that allows this (see the message)."""

    status, code = 409, "rollout_not_canary"


class InvalidRollout(InvalidParameter):
    """The rollout's cameras or settings cannot work (see the message)."""

    code = "invalid_rollout"


class GateDatasetRequired(ServiceError):
    """A candidate with other classes needs the labelled set (CAMPUSGUARD_GATE_DATASET) to be judged."""

    status, code = 409, "rollout_needs_gate_dataset"


class CandidateMapTooLow(ServiceError):
    """The candidate's mAP on the shared classes is below the floor: the figures are in the message."""

    status, code = 422, "candidate_map_too_low"


@dataclass(frozen=True, slots=True)
class RolloutSettings:
    """The bounds of one rollout (the POST body's, with the defaults filled in)."""

    window_s: float = 300.0
    min_frames: int = 50
    agreement_floor: float = 0.95
    max_error_ratio: float = 0.01
    max_latency_ratio: float = 2.0
    map_floor: float | None = None


def judge(settings: RolloutSettings, window: Window, comparable: bool) -> str | None:
    """Why the window fails (None: it passes, or holds too few frames to say anything)."""
    if window.compared < settings.min_frames:
        return None
    if comparable and window.agreement is not None and window.agreement < settings.agreement_floor:
        return (f"agreement {window.agreement:.3f} below the floor {settings.agreement_floor:g} "
                f"over {window.compared} frames")
    candidate, current = window.error_rate("candidate"), window.error_rate("current")
    if candidate - current > settings.max_error_ratio:
        return (f"errors: candidate {window.errors['candidate']}/{window.frames['candidate']} frames, current "
                f"{window.errors['current']}/{window.frames['current']} (more than {settings.max_error_ratio:g} "
                "per frame above the current)")
    slow, fast = window.p50_ms["candidate"], window.p50_ms["current"]
    if slow is not None and fast and slow / fast > settings.max_latency_ratio:
        return (f"latency: candidate p50 {slow:.1f} ms, current {fast:.1f} ms (over {settings.max_latency_ratio:g}x)")
    return None


@dataclass
class Rollout:
    """One rollout of a name, as GET /admin/models/{name}/rollout shows it (``as_dict``)."""

    model: str
    candidate_weights: str
    current_weights: str
    cameras: list[str]
    settings: RolloutSettings
    comparable: bool
    started_at: dt.datetime
    phase: str = "shadow"
    phase_started_at: dt.datetime | None = None
    phase_started: float = 0.0  # on the controller's clock
    ended_at: dt.datetime | None = None
    reason: str | None = None
    window: Window = field(default_factory=lambda: Window(0, None, {"candidate": 0, "current": 0},
                                                           {"candidate": 0, "current": 0},
                                                           {"candidate": None, "current": None}))
    map_figures: dict[str, Any] | None = None
    history: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=HISTORY))
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def running(self) -> bool:
        return self.phase in ("shadow", "canary")

    def as_dict(self) -> dict[str, Any]:
        with self.lock:
            w = self.window
            return {"model": self.model, "candidate_weights": self.candidate_weights,
                    "current_weights": self.current_weights, "phase": self.phase, "reason": self.reason,
                    "started_at": iso(self.started_at), "phase_started_at": iso(self.phase_started_at),
                    "ended_at": iso(self.ended_at), "cameras": list(self.cameras), "settings": asdict(self.settings),
                    "comparable": self.comparable, "map": self.map_figures,
                    "compared": w.compared, "agreement": w.agreement, "errors": dict(w.errors),
                    "latency_ms": {"candidate_p50": w.p50_ms["candidate"], "current_p50": w.p50_ms["current"]},
                    "history": list(self.history)}
