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

from app.inference.precision.agreement import Boxes, as_boxes, iou_matrix, match  # noqa: F401 (re-exported)


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
