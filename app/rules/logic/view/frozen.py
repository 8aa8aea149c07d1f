"""Is the picture frozen? Consecutive checks whose raw pixels are identical.

Why raw pixels: every live sensor adds noise, so two live frames differ at full
resolution even when nothing moves; any downscaling averages that noise away and would
make a quiet scene look frozen. ``features.sample_grid`` keeps 64 x 48 raw pixels.

A perfectly static scene from a noiseless encoder sends identical frames too, and no
check on pixels can tell that from a frozen picture. So the tracker learns what "normal"
looks like for this camera (the median difference between checks while not in a
streak; a difference is the mean over the 90 % of sampled pixels that changed least, so
an on-screen clock does not count): a camera whose normal is identical frames is **suspended** (never alarms, and
says so in its state) until its frames start to differ; for the others "identical" means
a difference below a quarter of their normal one (capped by the sensitivity's tolerance).
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections import deque

import numpy as np

NORMAL_CHECKS = 30  # recent differences that define this camera's normal
MIN_NORMAL = 10  # checks needed before the tracker judges at all
STATIC = 0.05  # a normal difference at or below this: frames are identical when nothing moves
KEEP = 0.9  # share of the samples compared (the 10 % that changed most are left out)


def trimmed_difference(a: np.ndarray, b: np.ndarray) -> float:
    """Mean absolute difference over the KEEP share of samples that changed least: a
    recorder's clock or logo burnt into a frozen picture changes a few per cent of it
    every second, and must not make the picture look live."""
    d = np.abs(a - b).ravel()
    keep = int(len(d) * KEEP)
    return float(np.partition(d, keep - 1)[:keep].mean()) if keep else 0.0


class FrozenTracker:
    def __init__(self) -> None:
        self._clear()

    def _clear(self) -> None:
        self.previous: np.ndarray | None = None
        self.previous_at: dt.datetime | None = None
        self.normal: deque[float] = deque(maxlen=NORMAL_CHECKS)
        self.streak_since: dt.datetime | None = None
        self.last_difference: float | None = None
        self._normal_median = 0.0

    def reset(self) -> None:
        self._clear()

    @property
    def learning(self) -> bool:
        return len(self.normal) < MIN_NORMAL

    @property
    def suspended(self) -> bool:
        return not self.learning and self._normal_median <= STATIC

    def update(self, samples: np.ndarray, when: dt.datetime, tolerance: float) -> bool | None:
        """True: identical to the previous check (the streak began at ``streak_since``);
        False: live; None: cannot judge (first frame, still learning, or suspended)."""
        previous, previous_at = self.previous, self.previous_at
        self.previous, self.previous_at = samples, when
        if previous is None or previous.shape != samples.shape:
            return None
        diff = trimmed_difference(samples, previous)
        self.last_difference = diff
        identical = bool(self.normal) and diff <= min(tolerance, 0.25 * self._normal_median)
        if identical and not self.learning and not self.suspended:
            if self.streak_since is None:
                self.streak_since = previous_at
            return True
        self.streak_since = None
        self.normal.append(diff)  # only outside a streak: a freeze never becomes "normal"
        self._normal_median = statistics.median(self.normal)
        if self.learning or self.suspended:
            return None
        return False
