"""Do the GPU's detections match the CPU's? Box matching against a stored reference.

fp16 and other kernels move scores and box edges a little, so exact equality is the wrong
test; what matters is that every object the CPU finds is found on the GPU (same class,
IoU >= 0.5) and nothing new appears. The CPU reference is computed once, on any machine,
and carried to the GPU machine (which then needs no CPU run of its own).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

Boxes = list[list[float]]  # [x1, y1, x2, y2, confidence, class_id] per detection


@dataclass(frozen=True)
class ParityResult:
    images: int
    reference_boxes: int
    boxes: int
    matched: int
    recall: float  # reference boxes found again
    box_precision: float  # boxes that match a reference box
    mean_iou: float
    max_conf_diff: float
    passed: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


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


def compare(reference: dict[str, Boxes], found: dict[str, Boxes], min_recall: float = 0.95,
            min_precision: float = 0.95) -> ParityResult:
    """Match image by image; an image missing from ``found`` counts as nothing found."""
    n_ref = n_found = n_match = 0
    ious: list[float] = []
    conf_diff = 0.0
    for name, ref in reference.items():
        got = found.get(name, [])
        pairs = match(ref, got)
        n_ref, n_found, n_match = n_ref + len(ref), n_found + len(got), n_match + len(pairs)
        ious += [iou for _, _, iou in pairs]
        conf_diff = max([conf_diff] + [abs(ref[i][4] - got[j][4]) for i, j, _ in pairs])
    recall = n_match / n_ref if n_ref else 1.0
    precision = n_match / n_found if n_found else 1.0
    return ParityResult(len(reference), n_ref, n_found, n_match, recall, precision,
                        float(np.mean(ious)) if ious else 0.0, conf_diff,
                        recall >= min_recall and precision >= min_precision)


def as_boxes(detections) -> Boxes:
    """``Pipeline.detect`` output -> plain lists (JSON-ready)."""
    return [[round(d.x1, 2), round(d.y1, 2), round(d.x2, 2), round(d.y2, 2), round(d.confidence, 4), d.class_id]
            for d in detections]
