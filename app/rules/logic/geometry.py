"""Zones as polygons in normalized coordinates, and the foot point of a box.

Point-in-polygon is OpenCV's ``pointPolygonTest`` (works for concave polygons; a point on
the border counts as inside). Working in normalized coordinates means the polygon never
has to be rescaled per frame size: the foot point is normalized instead.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import cv2
import numpy as np


def foot_point(x1: float, y1: float, x2: float, y2: float, width: int, height: int) -> tuple[float, float]:
    """Bottom-centre of a pixel box, normalized to 0..1 by the frame size."""
    return ((x1 + x2) / 2.0 / width, y2 / height)


def box_area_fraction(x1: float, y1: float, x2: float, y2: float, width: int, height: int) -> float:
    return max(0.0, x2 - x1) * max(0.0, y2 - y1) / float(width * height)


class Polygon:
    """A closed polygon (normalized coordinates) with a cheap bounding-box pre-test."""

    __slots__ = ("points", "_contour", "_bbox")

    def __init__(self, points: Sequence[Sequence[float]]) -> None:
        self.points = tuple((float(x), float(y)) for x, y in points)
        if len(self.points) < 3:
            raise ValueError("a polygon needs at least 3 points")
        self._contour = np.asarray(self.points, dtype=np.float32).reshape(-1, 1, 2)
        xs, ys = [p[0] for p in self.points], [p[1] for p in self.points]
        eps = 1e-6  # the contour is float32: keep border points inside the pre-test
        self._bbox = (min(xs) - eps, min(ys) - eps, max(xs) + eps, max(ys) + eps)

    def contains(self, x: float, y: float) -> bool:
        bx0, by0, bx1, by1 = self._bbox
        if x < bx0 or x > bx1 or y < by0 or y > by1:
            return False
        return cv2.pointPolygonTest(self._contour, (float(x), float(y)), False) >= 0

    def to_pixels(self, width: int, height: int) -> np.ndarray:
        """int32 (N, 2) vertices for drawing on a frame of this size."""
        pts = np.asarray(self.points, dtype=np.float64) * (width, height)
        return np.round(pts).astype(np.int32)


def box_ratio(x1: float, y1: float, x2: float, y2: float) -> float:
    """Width / height of a pixel box (inf for a flat box), for the min_ratio/max_ratio filters."""
    h = y2 - y1
    return (x2 - x1) / h if h > 0 else float("inf")


EPS = 1e-12  # below this a cross product is "on the line": rounding must not decide a side


def _cross(ax: float, ay: float, bx: float, by: float, px: float, py: float) -> float:
    return (bx - ax) * (py - ay) - (by - ay) * (px - ax)


def _side(ax: float, ay: float, bx: float, by: float, px: float, py: float) -> int:
    c = _cross(ax, ay, bx, by, px, py)
    return 0 if abs(c) <= EPS else (1 if c > 0 else -1)


class Polyline:
    """A counting line of two or more normalized points.

    ``crossing`` decides on the path of a point between two frames (segment ``p -> q``), not
    on where a box is, so an object standing on the line (its box jittering) never crosses:
    a crossing needs the path to go strictly from one side of a line segment to the other.
    Sides are seen from each segment's first point towards its second, in image
    coordinates (y down): ``right`` is where the cross product is positive.
    """

    __slots__ = ("points",)

    def __init__(self, points: Sequence[Sequence[float]]) -> None:
        self.points = tuple((float(x), float(y)) for x, y in points)
        if len(self.points) < 2:
            raise ValueError("a line needs at least 2 points")

    def touches(self, p: tuple[float, float], eps: float = EPS) -> bool:
        """Whether the point lies on the line (a path that ends there has not crossed yet)."""
        for (ax, ay), (bx, by) in zip(self.points, self.points[1:], strict=False):  # each segment
            if abs(_cross(ax, ay, bx, by, *p)) <= eps and min(ax, bx) - eps <= p[0] <= max(ax, bx) + eps \
                    and min(ay, by) - eps <= p[1] <= max(ay, by) + eps:
                return True
        return False

    def crossing(self, p: tuple[float, float], q: tuple[float, float]) -> Literal["in", "out"] | None:
        """``"in"`` (left to right), ``"out"`` (right to left) or None for the path p -> q.

        The first segment of the line that the path crosses decides (one crossing per path).
        """
        for (ax, ay), (bx, by) in zip(self.points, self.points[1:], strict=False):  # each segment
            sp, sq = _side(ax, ay, bx, by, *p), _side(ax, ay, bx, by, *q)
            if sp * sq >= 0:
                continue  # same side, or starts/ends on the line: no crossing yet
            sa, sb = _side(*p, *q, ax, ay), _side(*p, *q, bx, by)
            if sa * sb > 0:
                continue  # the path passes beside this segment
            return "in" if sq > 0 else "out"
        return None
