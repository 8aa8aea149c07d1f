"""``RolloutController``: new weights for a name behind the shadow reference (issue 41 part 4, docs/models.md).

The steps, in order, each audited and counted (app/flow/series.py):

1. **start** (POST /admin/models/{name}/rollout): the candidate is checked and loaded beside
   the serving engine exactly as a swap's new weights are (``ModelSwitch.candidate``: every
   refusal of a swap, then loading at low priority); the name is held (no swap or unload of
   it meanwhile). Same classes as the current model: phase ``shadow``. Other classes: the
   candidate cannot be compared box for box, so it must score on the labelled set at least
   the current model's mAP minus 0.01 on the shared classes (or ``map_floor``), checked here
   (``MapGate``), and goes straight to ``canary``, judged on errors and latency only.
2. **shadow**: every frame the current engine answers for the name is also run by the
   candidate, off the request path (app/inference/shadow/candidate.py, bounded rate and queue).
3. **canary**: the chosen cameras are served by the candidate, and the current engine re-runs
   their frames: the reference is the current model at the precision it serves.
4. **promoted**: the candidate engine becomes the name's engine (``ModelSwitch.adopt``: no
   second load); the old one drains and is freed. **rolled_back**: the canary cameras go back
   to the current engine and the candidate drains and is freed.

Every ``tick`` (a background thread, once a second; a test calls it with its own clock) reads
each running rollout's window and judges it (app/flow/rollout_state.py ``judge``): a failing
window with at least ``min_frames`` compared rolls back at once; a passing one advances once
the phase has lasted ``window_s``; a window that never fills never advances.
"""

from __future__ import annotations

import datetime as dt
import logging
import math
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any, Protocol

from app.core.metrics import Metrics
from app.core.timeutil import iso
from app.flow.models import ModelRouter, RolloutRoute
from app.flow.modelswap import Candidate, ModelSwitch
from app.flow.rollout_state import (
    GateDatasetRequired,
    InvalidRollout,
    NoRollout,
    Rollout,
    RolloutInProgress,
    RolloutPhaseConflict,
    RolloutSettings,
    judge,
)
from app.flow.series import RolloutSeries
from app.flow.tap import Tap
from app.inference.engine import InferenceEngine
from app.inference.modelset import ServedModel
from app.inference.shadow.candidate import CandidateBook, CandidateLane, CandidateOptions, Window

log = logging.getLogger("campusguard.rollout")
Record = Callable[[str, str, str | None, str | None], None]  # (action, model, before, after): a system audit record


class Comparator(Protocol):
    """What the controller needs of a rollout's comparator (``CandidateLane``)."""

    book: CandidateBook

    @property
    def taps(self) -> Mapping[str, Tap]: ...

    def start(self) -> None: ...

    def stop(self) -> None: ...


# (candidate, the name's current engine, the book, comparable, count one compared frame) -> a comparator
LaneFactory = Callable[[Candidate, Callable[[], InferenceEngine | None], CandidateBook, bool, Callable[[], None]],
                       Comparator]


class MapGate(Protocol):
    def __call__(self, name: str, current: ServedModel, candidate: Candidate, floor: float | None,
                 ) -> dict[str, Any]:
        """The figures ({"shared_classes", "current_map", "candidate_map", "floor"}) when the candidate
        scores high enough on the labelled set; GateDatasetRequired or CandidateMapTooLow otherwise."""


def candidate_lane(candidate: Candidate, current: Callable[[], InferenceEngine | None], book: CandidateBook,
                   comparable: bool, on_compared: Callable[[], None],
                   options: CandidateOptions | None = None) -> CandidateLane:
    """The real comparator (app/inference/shadow/candidate.py) over the candidate's engine."""
    return CandidateLane(candidate.engine, current, book, options or CandidateOptions(), comparable, on_compared)


def no_map_gate(name: str, current: ServedModel, candidate: Candidate, floor: float | None) -> dict[str, Any]:
    raise GateDatasetRequired(f"the candidate's classes differ from model {name!r}'s, so it cannot be compared "
                              "live: set CAMPUSGUARD_GATE_DATASET to a labelled set to judge it by mAP")


class RolloutController:
    """The rollouts of this process's models: at most one running per name; the latest kept per name."""

    def __init__(self, router: ModelRouter, switch: ModelSwitch, metrics: Metrics,
                 lanes: LaneFactory = lambda *parts: candidate_lane(*parts), map_gate: MapGate = no_map_gate,
                 floor: Callable[[str], float] = lambda precision: 0.95,
                 record: Record = lambda action, model, before, after: None,
                 clock: Callable[[], float] = time.time, tick_s: float = 1.0) -> None:
        self.router, self.switch, self.series = router, switch, RolloutSeries.of(metrics)
        self.lanes, self.map_gate, self.floor, self.record = lanes, map_gate, floor, record
        self.clock, self.tick_s = clock, tick_s
        self._rollouts: dict[str, Rollout] = {}
        self._parts: dict[str, tuple[Candidate, Comparator]] = {}
        self._starting: set[str] = set()
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        for model in router.models.names():
            self.series.declare(model)

    # --- reading ------------------------------------------------------------------------
    def latest(self, name: str) -> Rollout | None:
        return self._rollouts.get(name)

    def get(self, name: str) -> Rollout:
        rollout = self._rollouts.get(name)
        if rollout is None:
            self.router.models.get(name)  # 404 unknown_model first
            raise NoRollout(f"no rollout of model {name!r} since the service started "
                            f"(POST /admin/models/{name}/rollout starts one)")
        return rollout

    # --- start --------------------------------------------------------------------------
    def start(self, name: str, weights: str, cameras: Sequence[str] | None, settings: RolloutSettings,
              floor_given: bool) -> Rollout:
        """Check and load the candidate, then its first phase (module docstring). ``floor_given``:
        whether ``settings.agreement_floor`` was the caller's (else the served precision's)."""
        current = self.router.models.get(name)  # 404 unknown_model
        with self._lock:
            running = self._rollouts.get(name)
            if name in self._starting or name in self._parts:
                phase = running.phase if running is not None and running.running else "loading"
                raise RolloutInProgress(f"a rollout of model {name!r} is under way ({phase}; "
                                        f"DELETE /admin/models/{name}/rollout aborts it)")
            chosen = self._cameras(name, cameras)
            self._starting.add(name)
        try:
            candidate = self.switch.candidate(name, weights)  # the swap's checks and refusals; loads at low priority
            try:
                settings, figures = self._prepared(name, current, candidate, settings, floor_given)
                with self._lock:
                    return self._begin(name, current, candidate, chosen, settings, figures)
            except BaseException:
                self.switch.retire(name, candidate.engine)
                self.switch.release(name)
                raise
        finally:
            with self._lock:
                self._starting.discard(name)

    def _cameras(self, name: str, cameras: Sequence[str] | None) -> list[str]:
        own = self.router.cameras_of(name)
        if cameras is None:
            if not own:
                raise InvalidRollout(f"model {name!r} has no camera in the site file: name the canary cameras "
                                     "(cameras: [...])")
            return own[:max(1, len(own) // 2)]
        chosen = list(dict.fromkeys(cameras))
        if not chosen:
            raise InvalidRollout("cameras: name at least one canary camera (or leave it out: the first half of "
                                 f"model {name!r}'s cameras)")
        others = [c for c in chosen if self.router.model_of(c) != name]
        if others:
            raise InvalidRollout(f"cameras {', '.join(others)[:300]} do not use model {name!r} (the site file "
                                 f"says which model a camera uses; {name!r}'s: {', '.join(own) or 'none'})")
        return chosen

    def _prepared(self, name: str, current: ServedModel, candidate: Candidate, settings: RolloutSettings,
                  floor_given: bool) -> tuple[RolloutSettings, dict[str, Any] | None]:
        """The floor of the served precision (unless given) and, for a candidate with other classes,
        the mAP check's figures (its refusals propagate); outside the lock: the check takes a while."""
        engine = current.engine
        if not floor_given:
            precision = engine.pipeline.detector.precision if engine is not None else "fp32"
            settings = replace(settings, agreement_floor=self.floor(precision))
        known = current.class_names()
        comparable = known is not None and dict(known) == dict(candidate.classes)
        return settings, None if comparable else self.map_gate(name, current, candidate, settings.map_floor)

    def _begin(self, name: str, current: ServedModel, candidate: Candidate, cameras: list[str],
               settings: RolloutSettings, figures: dict[str, Any] | None) -> Rollout:
        comparable = figures is None
        now = self.clock()
        book = CandidateBook(settings.window_s, self.clock)
        lane = self.lanes(candidate, lambda: self.router.models.get(name).engine, book, comparable,
                          lambda: self._count_compared(name))
        stamp = self._stamp(now)
        rollout = Rollout(name, candidate.path.name, current.weights.name, cameras, settings, comparable,
                          started_at=stamp, phase_started_at=stamp, phase_started=now, map_figures=figures)
        lane.start()
        self._rollouts[name] = rollout
        self._parts[name] = (candidate, lane)
        self.series.started(name, settings.agreement_floor)
        if comparable:
            self.router.reroute(name, RolloutRoute(frozenset(cameras), None, lane.taps))
        else:
            self._to_canary(name, rollout, "other classes: judged by mAP before the start, then on errors and "
                            "latency in the canary", audit=False)  # the start's own record says so
        log.info("rollout of %s: %s beside %s, phase %s, canary cameras %s", name, rollout.candidate_weights,
                 rollout.current_weights, rollout.phase, ", ".join(cameras))
        return rollout

    # --- the evaluation ----------------------------------------------------------------
    def tick(self) -> None:
        """Judge every running rollout's window once (module docstring)."""
        with self._lock:
            for name in list(self._parts):
                try:
                    self._judge(name)
                except Exception:  # noqa: BLE001 - one rollout's trouble must not stop the others' ticks
                    log.exception("rollout of %s: the evaluation failed", name)

    def _judge(self, name: str) -> None:
        rollout = self._rollouts[name]
        _, lane = self._parts[name]
        window = lane.book.window()
        now = self.clock()
        with rollout.lock:
            rollout.window = window
            rollout.history.append({"at": iso(self._stamp(now)), "phase": rollout.phase, "agreement": window.agreement,
                                    "compared": window.compared})
        self.series.agreement.labels(name).set(math.nan if window.agreement is None else window.agreement)
        failed = judge(rollout.settings, window, rollout.comparable)
        held = now - rollout.phase_started >= rollout.settings.window_s
        if failed is not None:
            self._end(name, "rolled_back", f"{rollout.phase}: {failed}", "model.rollout.rollback", "rolled_back")
        elif window.compared >= rollout.settings.min_frames and held:
            if rollout.phase == "shadow":
                self._to_canary(name, rollout, f"shadow held: {self._figures(window)}")
            else:
                self._end(name, "promoted", f"canary held: {self._figures(window)}", "model.rollout.promote",
                          "promoted")

    @staticmethod
    def _figures(window: Window) -> str:
        agreement = "n/a" if window.agreement is None else f"{window.agreement:.3f}"
        return (f"agreement {agreement} over {window.compared} frames, errors {window.errors['candidate']} vs "
                f"{window.errors['current']}, p50 {window.p50_ms['candidate']} vs {window.p50_ms['current']} ms")

    def _to_canary(self, name: str, rollout: Rollout, why: str, audit: bool = True) -> None:
        candidate, lane = self._parts[name]
        lane.book.reset()
        now = self.clock()
        with rollout.lock:
            rollout.phase, rollout.phase_started, rollout.phase_started_at = "canary", now, self._stamp(now)
        self.router.reroute(name, RolloutRoute(frozenset(rollout.cameras), candidate.engine, lane.taps))
        self.series.in_phase(name, "canary")
        if audit:
            self.record("model.rollout.canary", name, rollout.current_weights,
                        f"{rollout.candidate_weights} serves {', '.join(rollout.cameras)}; {why}"[:500])
        log.info("rollout of %s: canary on %s (%s)", name, ", ".join(rollout.cameras), why)

    def _end(self, name: str, phase: str, reason: str, action: str | None, outcome: str) -> None:
        """Promote (``phase`` promoted) or roll back; ``action``: the system's audit record (None: the
        route records it, with the caller)."""
        candidate, lane = self._parts.pop(name)
        rollout = self._rollouts[name]
        now = self.clock()
        try:
            if phase == "promoted":
                self.switch.adopt(name, candidate)  # the candidate's engine serves the name; the old one drains
                self.router.reroute(name, None)
            else:
                self.router.reroute(name, None)  # canary cameras back to the current engine first
                self.switch.retire(name, candidate.engine)  # its requests in flight finish, then it is freed
        finally:
            lane.stop()
            self.switch.release(name)
        with rollout.lock:
            rollout.phase, rollout.reason, rollout.ended_at = phase, reason, self._stamp(now)
            rollout.phase_started, rollout.phase_started_at = now, rollout.ended_at
        self.series.ended(name, phase, outcome)
        if action is not None:
            self.record(action, name, rollout.current_weights, f"{rollout.candidate_weights}: {reason}"[:500])
        log.warning("rollout of %s %s: %s", name, phase.replace("_", " "), reason) if phase == "rolled_back" else \
            log.info("rollout of %s promoted: %s", name, reason)

    def _count_compared(self, name: str) -> None:
        rollout = self._rollouts.get(name)
        if rollout is not None and rollout.running:
            self.series.compared.labels(name, rollout.phase).inc()

    # --- by hand ------------------------------------------------------------------------
    def promote(self, name: str, actor: str = "") -> Rollout:
        """Promote now (only in the canary phase: 409 otherwise)."""
        with self._lock:
            rollout = self.get(name)
            if rollout.phase != "canary" or name not in self._parts:
                raise RolloutPhaseConflict(f"the rollout of {name!r} is {rollout.phase}: only a canary can be promoted")
            self._end(name, "promoted", f"promoted by hand{' by ' + actor if actor else ''}", None, "promoted")
            return rollout

    def abort(self, name: str, actor: str = "") -> Rollout:
        """Roll back now (a running rollout only: 409 ``rollout_ended`` otherwise)."""
        with self._lock:
            rollout = self.get(name)
            if name not in self._parts:
                raise RolloutPhaseConflict(f"the rollout of {name!r} has ended ({rollout.phase})",
                                           code="rollout_ended")
            self._end(name, "rolled_back", f"aborted by hand{' by ' + actor if actor else ''} in {rollout.phase}",
                      None, "aborted")
            return rollout

    # --- the ticker ---------------------------------------------------------------------
    def start_ticking(self) -> None:
        self._thread = threading.Thread(target=self._run, name="campusguard-rollout-tick", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Shutdown: the ticker stops; a running rollout ends with the process (the models file wins)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        with self._lock:
            for _, lane in self._parts.values():
                lane.stop()

    def _run(self) -> None:
        while not self._stop.wait(self.tick_s):
            self.tick()

    def _stamp(self, at: float) -> dt.datetime:
        return dt.datetime.fromtimestamp(at, dt.UTC)
