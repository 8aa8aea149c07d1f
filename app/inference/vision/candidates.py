"""The compacted head output: only the anchors that can still become a detection.

YOLOv8's head scores every one of its 8,400 anchors (at 640x640) for all 80 classes. At the
service's confidence a few dozen anchors survive; the rest is work for nothing, and on a
GPU replica copying the whole ``(N, 84, 8400)`` tensor to the host and scanning it in numpy
was the ceiling (docs/benchmarks.md, "Measured on an NVIDIA H200"). So the runtime keeps
only the anchors whose best class score passes a floor (the lowest confidence any request in
the batch asked for), on the device where it can (``TorchDetector.candidates``) and in numpy
otherwise (``compact``). Both give the same rows in the same (anchor) order, and the one NMS
in ``postprocess`` then runs on them for every backend: a floor at or below a request's
``conf`` drops nothing that request could get back.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(slots=True)
class Candidates:
    """One image's anchors whose best class score passed the floor."""

    rows: np.ndarray  # (k, 4 + nc) float32: cx, cy, w, h (model-input pixels), then the class scores
    anchors: np.ndarray  # (k,) int64, ascending: where each row sits in the head (NMS's tie-break order)

    def __len__(self) -> int:
        return len(self.anchors)

    @classmethod
    def of_head(cls, head: np.ndarray, floor: float | None = None) -> Candidates:
        """One image's full head output (4 + nc, anchors) -> its candidates above ``floor``
        (every anchor when ``floor`` is None)."""
        head = np.asarray(head, dtype=np.float32)
        if head.ndim != 2 or head.shape[0] < 5:
            raise ValueError(f"expected a (4+nc, anchors) head output, got shape {head.shape}")
        if floor is None:
            return cls(np.ascontiguousarray(head.T), np.arange(head.shape[1], dtype=np.int64))
        keep = np.flatnonzero(head[4:].max(axis=0) > floor)
        return cls(np.ascontiguousarray(head[:, keep].T), keep.astype(np.int64))


def floors_of(floor: float | Sequence[float], n: int) -> np.ndarray:
    values = np.full(n, floor, np.float32) if np.isscalar(floor) else np.asarray(floor, np.float32)
    if values.shape != (n,):
        raise ValueError(f"expected {n} floors, got {values.shape}")
    return values


def compact(head: np.ndarray, floor: float | Sequence[float]) -> list[Candidates]:
    """A batch's full head output (N, 4 + nc, anchors) -> per image the anchors whose best
    class score exceeds its floor. One reduction over the class axis for the whole batch
    (contiguous rows, no argmax over 80 classes per anchor: that is left to the survivors)."""
    head = np.asarray(head, dtype=np.float32)
    if head.ndim != 3 or head.shape[1] < 5:
        raise ValueError(f"expected an (N, 4+nc, anchors) head output, got shape {head.shape}")
    floors = floors_of(floor, len(head))
    best = head[:, 4:, :].max(axis=1)  # (N, anchors)
    out = []
    for i in range(len(head)):
        keep = np.flatnonzero(best[i] > floors[i])
        out.append(Candidates(np.ascontiguousarray(head[i][:, keep].T), keep.astype(np.int64)))
    return out


def split_rows(rows: np.ndarray, image_index: np.ndarray, anchors: np.ndarray, n: int) -> list[Candidates]:
    """Rows gathered for a whole batch (sorted by image, then anchor) -> one Candidates per image."""
    bounds = np.searchsorted(image_index, np.arange(n + 1))
    return [Candidates(rows[a:b], anchors[a:b].astype(np.int64, copy=False))
            for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
