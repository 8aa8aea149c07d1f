"""Agreement of the primary with the reference, per camera and overall, over a rolling window.

One frame's score is the matching of ``campusguard parity`` (same class, IoU >= 0.5, greedy
one-to-one: ``app.inference.precision.agreement.match``): recall = reference boxes found
again, precision = primary boxes that match a reference box. Over the window the counts are
summed before dividing, so agreement = 2 * matched / (primary + reference) is exactly the F1
of parity's recall and precision on the same frames (a frame where neither found anything
adds nothing; a window of such frames agrees fully).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass

from app.inference.precision.agreement import Boxes, match

OVERALL = "_all"  # the overall series' camera_id (camera ids start with a letter or digit)
# Agreement below which the alert fires, by the served model's precision: a correct int8 model
# agrees only ~0.90-0.95 with fp32 (docs/shadow.md), so 0.95 would page all day on an int8
# replica; a real fault (a dropped class, a broken kernel) falls far below either floor.
ALERT_BELOW = {"fp32": 0.95, "fp16": 0.95, "bf16": 0.95, "int8": 0.85}


def alert_floor(precision: str, configured: float | None = None) -> float:
    """The floor this replica alerts below: the operator's CAMPUSGUARD_SHADOW_ALERT_BELOW, else
    the served precision's default."""
    return configured if configured is not None else ALERT_BELOW.get(precision, 0.95)
DROP_REASONS = ("busy", "stale", "failed")


@dataclass(frozen=True, slots=True)
class FrameScore:
    """One shadowed frame: box counts, matches, and the summed confidence change of its pairs."""

    primary: int
    reference: int
    matched: int
    conf_delta: float  # sum over matched pairs of primary confidence - reference confidence

    @property
    def agreement(self) -> float:
        total = self.primary + self.reference
        return 2 * self.matched / total if total else 1.0


def score(primary: Boxes, reference: Boxes, min_iou: float = 0.5) -> FrameScore:
    pairs = match(reference, primary, min_iou)
    delta = sum(primary[j][4] - reference[i][4] for i, j, _ in pairs)
    return FrameScore(len(primary), len(reference), len(pairs), float(delta))


@dataclass(frozen=True, slots=True)
class Summary:
    """What the window says (``agreement`` etc. are NaN while it holds no frame)."""

    frames: int
    primary_boxes: int
    reference_boxes: int
    matched: int
    recall: float
    precision: float
    agreement: float
    confidence_drift: float  # mean primary - reference confidence over matched boxes

    def as_dict(self) -> dict:
        return {k: (None if isinstance(v, float) and math.isnan(v) else round(v, 4) if isinstance(v, float) else v)
                for k, v in asdict(self).items()}


def summarize(scores: list[FrameScore]) -> Summary:
    if not scores:
        nan = math.nan
        return Summary(0, 0, 0, 0, nan, nan, nan, nan)
    p, r, m = (sum(getattr(s, k) for s in scores) for k in ("primary", "reference", "matched"))
    delta = sum(s.conf_delta for s in scores)
    return Summary(len(scores), p, r, m, m / r if r else 1.0, m / p if p else 1.0,
                   2 * m / (p + r) if p + r else 1.0, delta / m if m else math.nan)


class AgreementBook:
    """Scores of the last ``window_s`` seconds per camera (at most ``max_frames`` each) and
    overall, plus the lane's counters. Thread-safe: the lane writes, scrapes and routes read."""

    def __init__(self, window_s: float = 900.0, max_frames: int = 5000,
                 clock: Callable[[], float] = time.monotonic, alert_below: float = 0.95) -> None:
        self.window_s, self.max_frames, self.clock = window_s, max_frames, clock
        self.alert_below = alert_below  # exported for the alert rule and the console (alert_floor)
        self._cameras: dict[str, deque[tuple[float, FrameScore]]] = {}
        self._overall: deque[tuple[float, FrameScore]] = deque(maxlen=max_frames * 4)
        self._lock = threading.Lock()
        self.compared: dict[str, int] = {}
        self.sampled = 0
        self.dropped = dict.fromkeys(DROP_REASONS, 0)

    def add(self, camera: str | None, frame: FrameScore) -> None:
        now = self.clock()
        with self._lock:
            self._overall.append((now, frame))
            key = camera or ""
            if camera:
                self._cameras.setdefault(camera, deque(maxlen=self.max_frames)).append((now, frame))
            self.compared[key] = self.compared.get(key, 0) + 1

    def count_sampled(self) -> None:
        with self._lock:
            self.sampled += 1

    def drop(self, reason: str) -> None:
        with self._lock:
            self.dropped[reason] += 1

    def _live(self, rows: deque[tuple[float, FrameScore]]) -> list[FrameScore]:
        horizon = self.clock() - self.window_s
        while rows and rows[0][0] < horizon:
            rows.popleft()
        return [s for _, s in rows]

    def summary(self, camera: str | None = None) -> Summary:
        """The window of one camera, or overall (``None``)."""
        with self._lock:
            rows = self._overall if camera is None else self._cameras.get(camera, deque())
            return summarize(self._live(rows))

    def cameras(self) -> list[str]:
        with self._lock:
            return sorted(self._cameras)

    def counters(self) -> tuple[dict[str, int], int, dict[str, int]]:
        """(compared per camera, "" = frames without one; sampled; dropped per reason)."""
        with self._lock:
            return dict(self.compared), self.sampled, dict(self.dropped)
