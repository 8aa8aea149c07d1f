"""``ViewMonitor``: the view checks of one camera, driven by the frames' capture times.

The caller feeds every frame it evaluates (``observe``) with its capture time and the
detector's boxes; the monitor checks at most once per ``interval_s`` of capture time and
returns the problems that started or ended. Nothing here reads a clock: a gateway's burst
or a replayed day gives the same answers as live. Thread-safe (one lock per camera), so
the operator's ``accept`` may come from another thread than the frames.

Light modes: a colour picture is "day", a grey one (colour saturation about 0: the IR-cut
filter is out) is "night"; each has its own reference, learned the first time the camera
is seen in that mode. The IR switch at dusk therefore changes reference instead of
alarming; lights switching on or off change brightness, which no check looks at.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Iterable, Sequence

import numpy as np

from app.rules.logic.view.checks import Box, Verdict, judge, largest_box
from app.rules.logic.view.features import FrameFeatures, analyse
from app.rules.logic.view.frozen import FrozenTracker
from app.rules.logic.view.persistence import Persistence
from app.rules.logic.view.reference import Learner, Reference, thumbnail
from app.rules.logic.view.state import KindState, Mode, Status, ViewState, ViewTransition
from app.rules.site.viewchecks import KINDS, Kind, ViewCheckOptions

UTC = dt.timezone.utc
NIGHT_BELOW, DAY_ABOVE = 0.03, 0.06  # colour saturation hysteresis of the light mode
QUIET_BOX = 0.05  # the reference follows the view only while no object larger than this is in it
MODES: tuple[Mode, Mode] = ("day", "night")


class ViewCheckError(ValueError):
    """A call the monitor cannot serve (bad frame, naive time, nothing to accept)."""


def capture_time(when: dt.datetime) -> dt.datetime:
    if not isinstance(when, dt.datetime) or when.tzinfo is None or when.utcoffset() is None:
        raise ViewCheckError("when must be a timezone-aware datetime (the frame's capture time)")
    return when.astimezone(UTC)


def checked_frame(frame: np.ndarray) -> np.ndarray:
    if not isinstance(frame, np.ndarray) or frame.dtype != np.uint8 or not (
            frame.ndim == 2 or (frame.ndim == 3 and frame.shape[2] == 3)):
        raise ViewCheckError("frame must be a uint8 array, H x W (grey) or H x W x 3 (BGR or RGB)")
    if frame.shape[0] < 16 or frame.shape[1] < 16:
        raise ViewCheckError(f"frame too small for view checks: {frame.shape[1]} x {frame.shape[0]}")
    return frame


def checked_boxes(boxes: Iterable[Box]) -> list[Box]:
    out: list[Box] = []
    for box in boxes:
        if len(box) not in (4, 5) or not all(np.isfinite(float(v)) for v in box):
            raise ViewCheckError("a box is (x1, y1, x2, y2[, confidence]) normalised to 0..1")
        out.append(tuple(float(v) for v in box))
    return out


class ViewMonitor:
    """View checks of one camera. See the module docstring and docs/rules.md ("Camera view checks")."""

    def __init__(self, options: ViewCheckOptions | None = None):
        self._options = options or ViewCheckOptions()
        self._lock = threading.Lock()
        self._relearn_state()
        self._last_check: dt.datetime | None = None
        self._status: dict[Kind, tuple[Status, dt.datetime | None]] = {k: (self._status_of(k), None) for k in KINDS}

    def _relearn_state(self) -> None:
        self._shape: tuple[int, int] | None = None
        self._refs: dict[Mode, Reference | None] = {"day": None, "night": None}
        self._learners: dict[Mode, Learner] = {"day": Learner(), "night": Learner()}
        self._flat: dict[Mode, bool] = {"day": False, "night": False}  # the last view learned was flat
        self._mode: Mode | None = None
        self._frozen = FrozenTracker()
        self._persist: dict[Kind, Persistence] = {k: Persistence() for k in KINDS}
        self._last: tuple[FrameFeatures, np.ndarray, dt.datetime] | None = None
        self._sparse = False

    @property
    def options(self) -> ViewCheckOptions:
        return self._options

    @property
    def last_check(self) -> dt.datetime | None:
        """Capture time of the last frame that was checked (not merely observed)."""
        return self._last_check

    # -- the caller's three verbs -------------------------------------------------------

    def observe(self, when: dt.datetime, frame: np.ndarray, boxes: Iterable[Box] = ()) -> list[ViewTransition]:
        """Feed one frame (capture time, BGR/RGB/grey uint8, the detector's normalised boxes);
        returns the problems that started or ended with it (usually none). The frame is
        not copied: the caller must not modify it while it is the monitor's latest check
        (``accept`` uses it)."""
        when = capture_time(when)
        frame = checked_frame(frame)
        boxes = checked_boxes(boxes)
        with self._lock:
            if not self._options.enabled:
                return []
            restart = False
            if self._last_check is not None:
                gap = (when - self._last_check).total_seconds()
                if gap < 0 and -gap <= self._options.max_gap_s:
                    return []  # out of order within a burst: the check already ran on a later frame
                if gap < 0 or gap > self._options.max_gap_s:
                    restart = True  # clock went back (a replay) or frames too rare: old evidence is stale
                elif gap < self._options.interval_s:
                    return []
            self._sparse = restart and self._last_check is not None and when > self._last_check
            return self._check(when, frame, boxes, restart)

    def accept(self, when: dt.datetime | None = None) -> list[ViewTransition]:
        """The operator's "accept this view": the last checked frame becomes the reference of
        its light mode, the other mode's reference is dropped (it shows the old view; it is
        learned again when that mode comes), open problems end with reason ``accepted``."""
        with self._lock:
            if self._last is None or self._mode is None:
                raise ViewCheckError("no frame checked yet: nothing to accept")
            f, frame, checked_at = self._last
            at = capture_time(when) if when is not None else checked_at
            out = self._end_all(at, "accepted")
            self._refs = {"day": None, "night": None}
            self._learners = {"day": Learner(), "night": Learner()}
            self._refs[self._mode] = Reference.of([f], thumbnail(frame), at)
            self._frozen.streak_since = None
            self._update_status(at)
            return out

    def relearn(self, when: dt.datetime) -> list[ViewTransition]:
        """Forget both references and learn again (e.g. the camera was replaced)."""
        when = capture_time(when)
        with self._lock:
            out = self._end_all(when, "relearning")
            self._relearn_state()
            self._update_status(when)
            return out

    def reconfigure(self, options: ViewCheckOptions, when: dt.datetime) -> list[ViewTransition]:
        """New options (site file reloaded): references are kept; problems of kinds no
        longer checked (or of a disabled camera) end with reason ``disabled``."""
        when = capture_time(when)
        with self._lock:
            self._options = options
            out = self._end_all(when, "disabled", [k for k in KINDS if not options.enabled or k not in options.checks])
            self._update_status(when)
            return out

    def state(self) -> ViewState:
        with self._lock:
            checks = {}
            for kind in KINDS:
                status, since = self._status[kind]
                p = self._persist[kind]
                note = None
                if kind == "frozen" and status == "suspended":
                    note = "identical frames while nothing moves (static scene, noiseless encoder): frozen not judged"
                elif status == "suspended":
                    note = "the reference view has no structure (a black or flat picture): not judged"
                elif status == "learning" and self._mode and self._flat[self._mode]:
                    note = "the view has no structure (a black or flat picture): no reference can be learned from it"
                checks[kind] = KindState(status=status, since=since, pending_since=p.pending_since, note=note)
            learner = self._learners[self._mode] if self._mode else None
            progress = 1.0 if self._mode and self._refs[self._mode] else (
                learner.progress(self._last_check, self._options.learn_s) if learner and self._last_check else 0.0)
            return ViewState(
                enabled=self._options.enabled, mode=self._mode, last_check=self._last_check,
                frame_size=(self._shape[1], self._shape[0]) if self._shape else None,
                learned={m: (r.learned_at if r else None) for m, r in self._refs.items()},
                learning=progress, sparse=self._sparse, checks=checks)

    # -- one check ----------------------------------------------------------------------

    def _check(self, when: dt.datetime, frame: np.ndarray, boxes: list[Box], restart: bool) -> list[ViewTransition]:
        opts, th = self._options, self._options.thresholds
        out: list[ViewTransition] = []
        shape = frame.shape[:2]
        if self._shape is not None and shape != self._shape:
            out += self._end_all(when, "relearning")  # a new resolution: the references say nothing about it
            self._relearn_state()
        self._shape = shape
        f = analyse(frame)
        self._mode = self._light_mode(f)
        ref, fallback = self._refs[self._mode], self._refs[self._other(self._mode)]
        vetoed = largest_box(boxes, opts.veto_confidence) >= opts.veto_area
        verdict = judge(f, ref, fallback, boxes, vetoed, th)
        frozen = self._frozen.update(f.samples, when, th.frozen_tolerance)
        self._learn_or_follow(f, when, frame, boxes, verdict, vetoed)
        for kind in KINDS:
            raw = frozen if kind == "frozen" else verdict.raw[kind]
            if not opts.enabled or kind not in opts.checks:
                raw = None
            p = self._persist[kind]
            evidence = self._frozen.streak_since if kind == "frozen" else None
            persist = opts.frozen_after_s if kind == "frozen" and not p.problem else opts.persist_s
            change = p.update(when, raw, persist, restart, evidence)
            if change == "started":
                shown = ref or fallback
                out.append(ViewTransition(kind, "started", when, p.evidence or when, self._mode,
                                          reference_image=shown.image if shown else None,
                                          current_image=thumbnail(frame), metrics=dict(verdict.metrics)))
            elif change == "ended":
                out.append(ViewTransition(kind, "ended", when, p.evidence or when, self._mode, reason="healthy"))
        self._last_check = when
        self._last = (f, frame, when)
        self._update_status(when)
        return out

    def _light_mode(self, f: FrameFeatures) -> Mode:
        """Day (colour) or night (grey), with hysteresis; a burnt-out picture has no colour
        either, so a blinded frame keeps the mode it had."""
        if self._mode is None:
            return "night" if f.chroma < (NIGHT_BELOW + DAY_ABOVE) / 2 else "day"
        ref = self._refs[self._mode] or self._refs[self._other(self._mode)]
        if ref is not None and f.saturated - ref.saturated >= self._options.thresholds.blinded_saturated:
            return self._mode
        if self._mode == "day" and f.chroma < NIGHT_BELOW:
            return "night"
        if self._mode == "night" and f.chroma > DAY_ABOVE:
            return "day"
        return self._mode

    @staticmethod
    def _other(mode: Mode) -> Mode:
        return "night" if mode == "day" else "day"

    def _learn_or_follow(self, f: FrameFeatures, when: dt.datetime, frame: np.ndarray, boxes: Sequence[Box],
                         verdict: Verdict, vetoed: bool) -> None:
        """Learn the reference of the current mode from views that are not blinded, covered
        or turned away (judged against the other mode's reference, if there is one); once
        learned, follow it slowly while the view is healthy and quiet."""
        assert self._mode is not None
        ref = self._refs[self._mode]
        quiet = largest_box(boxes, 0.0) < QUIET_BOX
        if ref is None:
            if verdict.raw["blinded"] or verdict.raw["covered"] or verdict.raw["moved"] or vetoed:
                return
            learner = self._learners[self._mode]
            learner.add(f, when, frame, quiet)
            if learner.progress(when, self._options.learn_s) >= 1.0:
                built = learner.build(when)
                self._learners[self._mode] = Learner()
                self._flat[self._mode] = built.flat
                if not built.flat:  # a black or flat picture is no reference: learn on
                    self._refs[self._mode] = built
            return
        pending = any(p.problem or p.pending_since for k, p in self._persist.items() if k != "frozen")
        if verdict.healthy and quiet and not pending and self._last_check is not None:
            dt_s = min((when - self._last_check).total_seconds(), self._options.max_gap_s)
            ref.follow(f, when, dt_s, frame)

    def _end_all(self, when: dt.datetime, reason: str, kinds: Iterable[Kind] = KINDS) -> list[ViewTransition]:
        out = []
        for kind in kinds:
            p = self._persist[kind]
            evidence = p.evidence
            if p.end(when):
                out.append(ViewTransition(kind, "ended", when, evidence or when, self._mode, reason=reason))
        return out

    def _update_status(self, when: dt.datetime) -> None:
        for kind in KINDS:
            status = self._status_of(kind)
            if status != self._status[kind][0]:
                self._status[kind] = (status, when)

    def _status_of(self, kind: Kind) -> Status:
        if not self._options.enabled or kind not in self._options.checks:
            return "off"
        if self._persist[kind].problem:
            return "problem"
        if kind == "frozen":
            return "suspended" if self._frozen.suspended else "learning" if self._frozen.learning else "ok"
        if self._mode is None:
            return "learning"
        ref = self._refs[self._mode]
        if kind in ("blinded", "covered"):  # (moved: "turned away" only, so still "learning")
            ref = ref or self._refs[self._other(self._mode)]
        if ref is not None and ref.flat and kind != "blinded":
            return "suspended"  # an accepted flat view: covered, moved, defocused cannot be judged against it
        return "ok" if ref is not None else "learning"
