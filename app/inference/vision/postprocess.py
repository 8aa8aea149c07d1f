"""Decode the YOLOv8 head and apply our NMS policy.

One implementation, in numpy, for every backend: the ROCm migration found duplicate boxes
on one platform because each runtime brought its own NMS. Ours is class-aware, exact
greedy NMS with a deterministic tie-break (equal scores: the lower anchor index wins), and
vectorised: suppression is solved as the fixed point of a boolean matrix equation rather
than by a Python loop over boxes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from app.inference.vision.candidates import Candidates

DEFAULT_IOU = 0.7
MAX_CANDIDATES = 4096  # pre-NMS top-k by score; bounds the IoU matrix at 16M cells
MAX_FIXED_POINT_STEPS = 8  # then greedy_keep switches to the sequential pass


@dataclass(slots=True)
class Detections:
    """Detections of one image: xyxy boxes, scores and class ids, best score first."""

    boxes: np.ndarray  # (N, 4) float32
    scores: np.ndarray  # (N,) float32
    class_ids: np.ndarray  # (N,) int64

    def __len__(self) -> int:
        return len(self.scores)

    @classmethod
    def empty(cls) -> Detections:
        return cls(np.zeros((0, 4), np.float32), np.zeros(0, np.float32), np.zeros(0, np.int64))


def xywh_to_xyxy(xywh: np.ndarray) -> np.ndarray:
    out = np.empty_like(xywh)
    half_w, half_h = xywh[:, 2] / 2, xywh[:, 3] / 2
    out[:, 0] = xywh[:, 0] - half_w
    out[:, 1] = xywh[:, 1] - half_h
    out[:, 2] = xywh[:, 0] + half_w
    out[:, 3] = xywh[:, 1] + half_h
    return out


def pairwise_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU matrix between xyxy boxes ``a`` (N,4) and ``b`` (M,4)."""
    area_a = (a[:, 2] - a[:, 0]).clip(0) * (a[:, 3] - a[:, 1]).clip(0)
    area_b = (b[:, 2] - b[:, 0]).clip(0) * (b[:, 3] - b[:, 1]).clip(0)
    # (N, M) planes reused in place: 4-7x faster than (N, M, 2) temporaries at 4096 boxes,
    # with the same float operations in the same order (bit-identical results)
    w = np.minimum(a[:, None, 2], b[None, :, 2])
    w -= np.maximum(a[:, None, 0], b[None, :, 0])
    np.maximum(w, 0, out=w)
    h = np.minimum(a[:, None, 3], b[None, :, 3])
    h -= np.maximum(a[:, None, 1], b[None, :, 1])
    np.maximum(h, 0, out=h)
    inter = np.multiply(w, h, out=w)
    union = np.add(area_a[:, None], area_b[None, :], out=h)
    union -= inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def greedy_keep(boxes: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Greedy NMS over boxes already sorted best-first; returns a keep mask.

    Box i is kept iff no kept box before it overlaps it by more than the threshold:
    ``keep = ~any(S & keep[:, None], axis=0)`` with ``S`` the strictly upper-triangular
    suppression matrix. Iterating that from all-True reaches the greedy answer after
    (longest suppression chain + 1) vectorised steps, usually two or three.

    Each step costs O(n^2), so a long chain (dense, shifted boxes: hundreds of steps for
    thousands of candidates, seconds per image) would make it cubic. After
    ``MAX_FIXED_POINT_STEPS`` the exact sequential pass finishes the job in O(n^2).
    """
    n = len(boxes)
    # float32 IoU against a float64 threshold, as torchvision compares (numpy would
    # otherwise round 0.3 to float32 and keep a box whose IoU is exactly float32(0.3))
    suppress = np.triu(pairwise_iou(boxes, boxes) > np.float64(iou_threshold), k=1)
    keep: np.ndarray = np.ones(n, dtype=bool)
    for _ in range(min(n, MAX_FIXED_POINT_STEPS)):
        new_keep = ~(suppress & keep[:, None]).any(axis=0)
        if np.array_equal(new_keep, keep):
            return keep
        keep = new_keep
    keep = np.ones(n, dtype=bool)
    for i in range(n):  # long chain: one pass over the boxes, best first
        if keep[i]:
            keep[i + 1:] &= ~suppress[i, i + 1:]
    return keep


def nms(boxes: np.ndarray, scores: np.ndarray, class_ids: np.ndarray, iou_threshold: float) -> np.ndarray:
    """Class-aware greedy NMS; returns kept indices, best score first.

    Equal scores are ordered by index (stable sort), so the result never depends on the
    platform's sort. Classes never suppress each other, so each class is solved on its own
    small matrix (a loop over classes present, at most nc, never over boxes).
    """
    if len(scores) == 0:
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(-scores.astype(np.float64), kind="stable")
    sorted_boxes = boxes[order].astype(np.float32)
    sorted_classes = class_ids[order]
    keep = np.zeros(len(order), dtype=bool)
    for cls in np.unique(sorted_classes):
        members = np.flatnonzero(sorted_classes == cls)
        keep[members] = greedy_keep(sorted_boxes[members], iou_threshold)
    return order[keep]


def postprocess(
    pred: np.ndarray | Candidates,
    conf: float = 0.25,
    iou: float = DEFAULT_IOU,
    max_det: int = 300,
    classes: frozenset[int] | None = None,
    max_candidates: int = MAX_CANDIDATES,
    multi_label: bool = False,
) -> Detections:
    """One image's candidates (or its full head output (4+nc, anchors)), xywh in input
    pixels -> Detections.

    By default each anchor contributes its best class only (Ultralytics' predict); with
    ``multi_label`` every class above ``conf`` does (Ultralytics' val, used for mAP).
    Candidates compacted at a floor <= ``conf`` give exactly what the full head gives.
    """
    cand = pred if isinstance(pred, Candidates) else Candidates.of_head(pred, conf)
    rows = cand.rows
    if len(rows) == 0:
        return Detections.empty()
    class_scores = rows[:, 4:]
    if multi_label:
        # every (anchor, class) pair above conf is a candidate, as Ultralytics' val does
        # (class-major order, as np.nonzero over the (classes, anchors) head gives it)
        cls_idx, row_idx = np.nonzero(class_scores.T > conf)
        scores = class_scores[row_idx, cls_idx]
    else:
        cls_idx = class_scores.argmax(axis=1)
        scores = class_scores[np.arange(len(rows)), cls_idx]
        row_idx = np.flatnonzero(scores > conf)
        cls_idx, scores = cls_idx[row_idx], scores[row_idx]
    if classes is not None:
        # Filter after choosing each anchor's best class, as Ultralytics does: an anchor
        # whose best class is excluded contributes nothing, so a filtered result is always
        # a subset of the unfiltered one (never a second-best class surfacing).
        wanted = np.isin(cls_idx, np.fromiter(classes, dtype=np.int64, count=len(classes)))
        row_idx, cls_idx, scores = row_idx[wanted], cls_idx[wanted], scores[wanted]
    if scores.size == 0:
        return Detections.empty()
    if scores.size > max_candidates:
        top = np.sort(np.argsort(-scores, kind="stable")[:max_candidates])
        row_idx, cls_idx, scores = row_idx[top], cls_idx[top], scores[top]
    boxes = xywh_to_xyxy(rows[row_idx, :4])
    cand_scores = scores.astype(np.float32)
    cand_classes = cls_idx.astype(np.int64)
    keep = nms(boxes, cand_scores, cand_classes, iou)[:max_det]
    return Detections(boxes[keep], cand_scores[keep], cand_classes[keep])
