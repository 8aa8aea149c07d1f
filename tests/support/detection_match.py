"""Matching detections between two backends box by box, for the accuracy and OpenVINO tests."""

from __future__ import annotations

import numpy as np
from scipy.optimize import linear_sum_assignment

from app.inference.vision.postprocess import pairwise_iou


def match_same_class(ours: list, theirs: list) -> list[tuple[int, int, float]]:
    """One-to-one matching (max total IoU) of (name, score, xyxy) lists within each class."""
    pairs = []
    for name in {n for n, _, _ in ours} | {n for n, _, _ in theirs}:
        oi = [i for i, d in enumerate(ours) if d[0] == name]
        ti = [j for j, d in enumerate(theirs) if d[0] == name]
        if not oi or not ti:
            continue
        iou = pairwise_iou(np.array([ours[i][2] for i in oi], np.float32), np.array([theirs[j][2] for j in ti], np.float32))
        rows, cols = linear_sum_assignment(-iou)
        pairs.extend((oi[r], ti[c], float(iou[r, c])) for r, c in zip(rows, cols))
    return pairs
