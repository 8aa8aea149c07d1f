"""Zones as polygons in normalized coordinates, and the foot point of a box.

Point-in-polygon is OpenCV's ``pointPolygonTest`` (works for concave polygons; a point on
the border counts as inside). Working in normalized coordinates means the polygon never
has to be rescaled per frame size: the foot point is normalized instead.
"""

from __future__ import annotations

from collections.abc import Sequence

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
