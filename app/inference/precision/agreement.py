"""How far two sets of detections agree: one-to-one matching of boxes of the same class.

Used by the precision gate (a reduced precision against fp32 on the same frames) and by
``campusguard parity`` (a GPU against a stored CPU reference).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

Boxes = list[list[float]]  # [x1, y1, x2, y2, confidence, class_id] per detection


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """(len(a), len(b)) IoU of xyxy boxes."""
    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)), np.float64)
    tl = np.maximum(a[:, None, :2], b[None, :, :2])
    br = np.minimum(a[:, None, 2:4], b[None, :, 2:4])
    inter = np.clip(br - tl, 0, None).prod(-1)
    area = lambda x: (x[:, 2] - x[:, 0]) * (x[:, 3] - x[:, 1])  # noqa: E731
    return inter / (area(a)[:, None] + area(b)[None, :] - inter + 1e-9)


def match(reference: Boxes, found: Boxes, min_iou: float = 0.5) -> list[tuple[int, int, float]]:
    """Greedy one-to-one matches (ref index, found index, IoU), same class, best IoU first."""
    ref, got = np.asarray(reference, np.float64).reshape(-1, 6), np.asarray(found, np.float64).reshape(-1, 6)
    ious = iou_matrix(ref[:, :4], got[:, :4])
    ious[ref[:, 5][:, None] != got[:, 5][None, :]] = 0.0
    pairs = []
    while ious.size and ious.max() >= min_iou:
        i, j = np.unravel_index(int(ious.argmax()), ious.shape)
        pairs.append((int(i), int(j), float(ious[i, j])))
        ious[i, :] = 0.0
        ious[:, j] = 0.0
    return pairs


def f1_agreement(reference: Sequence[Boxes], found: Sequence[Boxes], min_iou: float = 0.5) -> float:
    """F1 of ``found`` against ``reference`` over many frames (1.0 when both found nothing)."""
    matched = total = 0
    for ref, got in zip(reference, found, strict=True):
        matched += len(match(ref, got, min_iou))
        total += len(ref) + len(got)
    return 2 * matched / total if total else 1.0


def as_boxes(detections) -> Boxes:
    """``Pipeline.detect`` output -> plain lists (JSON-ready)."""
    return [[round(d.x1, 2), round(d.y1, 2), round(d.x2, 2), round(d.y2, 2), round(d.confidence, 4), d.class_id]
            for d in detections]
