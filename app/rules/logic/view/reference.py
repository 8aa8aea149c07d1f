"""The reference view of one camera in one light mode: learned, then slowly followed.

Learned as the per-pixel median of the checks over the first ``learn_s`` (people walking
through are outvoted), with the median of each measure as its baseline. Afterwards, while
the view is healthy and nobody stands in it, it follows the scene with an exponential
average (time constant ``FOLLOW_S``): daylight, seasons and a parked car become the
reference; a change that lasts ``persist_s`` becomes a problem first.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

import cv2
import numpy as np

from app.rules.logic.view.features import FrameFeatures
from app.rules.logic.view.motion import MotionReference

FOLLOW_S = 900.0  # time constant of the reference following a healthy view
REBUILD_S = 60.0  # the motion reference (pre-rotated, transformed) is rebuilt at most this often
MIN_SAMPLES = 8
# Structure (``FrameFeatures.detail``) below this is a flat picture: black, a lens cap, noise
# alone (~0.8). Real scenes measure 11-45 on the test set's photos, tape ~1.9. A flat view has
# nothing to lose: it is no reference for covered, moved or defocused.
FLAT_DETAIL = 1.5
THUMB_W = 480  # width of the images shown to the operator


def thumbnail(frame: np.ndarray) -> np.ndarray:
    """The frame at most THUMB_W wide (for the before/after pair)."""
    h, w = frame.shape[:2]
    if w <= THUMB_W:
        return frame.copy()
    return cv2.resize(frame, (THUMB_W, max(1, round(h * THUMB_W / w))), interpolation=cv2.INTER_AREA)


@dataclass
class Reference:
    grey: np.ndarray  # float32, ANALYSIS_W wide
    motion: MotionReference
    detail: float
    texture: float  # detail per unit of brightness
    mean: float  # brightness (mean grey level)
    sharpness: float
    saturated: float
    image: np.ndarray  # what the operator sees as "before"
    learned_at: dt.datetime
    rebuilt_at: dt.datetime

    @property
    def flat(self) -> bool:
        """No structure to compare with (see FLAT_DETAIL)."""
        return self.detail < FLAT_DETAIL

    @classmethod
    def of(cls, samples: list[FrameFeatures], image: np.ndarray, when: dt.datetime) -> Reference:
        grey = np.median(np.stack([s.grey for s in samples]), axis=0).astype(np.float32)
        return cls(grey=grey, motion=MotionReference(grey),
                   detail=max(float(np.median([s.detail for s in samples])), 0.5),
                   texture=max(float(np.median([texture(s) for s in samples])), 1e-3),
                   mean=float(np.median([s.mean for s in samples])),
                   sharpness=max(float(np.median([s.sharpness for s in samples])), 1e-3),
                   saturated=float(np.median([s.saturated for s in samples])),
                   image=image, learned_at=when, rebuilt_at=when)

    def follow(self, f: FrameFeatures, when: dt.datetime, dt_s: float, frame: np.ndarray | None) -> None:
        """Move a little towards a healthy view (weight dt_s / FOLLOW_S)."""
        a = min(1.0, max(0.0, dt_s / FOLLOW_S))
        cv2.addWeighted(self.grey, 1 - a, f.grey.astype(np.float32), a, 0, dst=self.grey)
        self.detail += a * (f.detail - self.detail)
        self.texture += a * (texture(f) - self.texture)
        self.mean += a * (f.mean - self.mean)
        self.sharpness += a * (f.sharpness - self.sharpness)
        self.saturated += a * (f.saturated - self.saturated)
        if (when - self.rebuilt_at).total_seconds() >= REBUILD_S:
            self.motion = MotionReference(self.grey)
            self.rebuilt_at = when
            if frame is not None:
                self.image = thumbnail(frame)


def texture(f: FrameFeatures) -> float:
    """Structure per unit of brightness: unchanged when the light dims, low under paint."""
    return f.detail / max(f.mean, 8.0)


@dataclass
class Learner:
    """Collects checks of one light mode until a reference can be built."""

    started: dt.datetime | None = None
    samples: list[FrameFeatures] = field(default_factory=list)
    image: np.ndarray | None = None

    def add(self, f: FrameFeatures, when: dt.datetime, frame: np.ndarray, quiet: bool) -> None:
        if self.started is None:
            self.started = when
        self.samples.append(f)
        # the operator's "before": the first view, replaced now and then by one without people
        if self.image is None or (quiet and len(self.samples) % 10 == 1):
            self.image = thumbnail(frame)

    def progress(self, when: dt.datetime, learn_s: float) -> float:
        if self.started is None:
            return 0.0
        return min(1.0, (when - self.started).total_seconds() / learn_s, len(self.samples) / MIN_SAMPLES)

    def build(self, when: dt.datetime) -> Reference:
        assert self.image is not None and self.samples
        # the median needs no more than ~60 samples; keep them spread over the window
        step = max(1, len(self.samples) // 60)
        return Reference.of(self.samples[::step], self.image, when)
