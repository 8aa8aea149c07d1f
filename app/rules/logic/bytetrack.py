"""ByteTrack as ultralytics implements it, with each frame's arithmetic done on arrays.

Why not ultralytics' ``BYTETracker`` itself: at site scale the rules are bound by it. It spends
~430 µs per frame at 5 objects (docs/benchmarks.md, "Site scale"), almost all of it per-track
Python around tiny numpy calls: a Kalman update per matched track (``np.linalg.solve`` on one
4x4 matrix costs ~16 µs of overhead), and fresh array copies on every box read.

This module is the same algorithm, step for step: the same pools and list operations
(``joint``/``sub``/duplicate removal, the 1,000-track removed buffer, its quirks included), the
same association order and thresholds, ``lap.lapjv`` on the same float32 cost matrices, and the
same Kalman filter with the same floating-point operations, batched:

- predict runs once on the stacked pool (exactly ``F P Fᵀ + Q`` for ByteTrack's constant-velocity
  ``F``, whose products only add pairs of entries);
- the updates of a frame's matched tracks are deferred to one batched update before the pools
  merge: no step between a match and the merge reads a matched track's new state (the second
  association sees only unmatched pool tracks, the unconfirmed association only unconfirmed
  ones), and batched ``np.linalg.solve``/``matmul`` give bit-identical results to the per-track
  calls.

So the tracks are the same, bit for bit: tests/unit/test_bytetrack.py runs this and ultralytics'
tracker side by side on randomized sequences and compares every box and track id. ultralytics
is not imported here, so a rules worker that only tracks never loads torch.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.rules.site.schema import TrackerConfig

TRACKED, LOST, REMOVED = 1, 2, 3  # ultralytics' TrackState (New = 0 never reaches a pool)
REMOVED_BUFFER = 1000  # ultralytics keeps the last 1,000 removed tracks; membership by id matters
_STD_POS, _STD_VEL = 1.0 / 20, 1.0 / 160  # ultralytics' KalmanFilterXYAH weights
_D4, _D8 = np.arange(4), np.arange(8)
_F = np.eye(8)  # constant velocity, one frame: position += velocity
_F[:4, 4:] = np.eye(4)
_NOISE = np.array([_STD_POS, _STD_POS, 0.0, _STD_POS, _STD_VEL, _STD_VEL, 0.0, _STD_VEL])  # per unit of height


class _Track:
    """One track: ultralytics' ``STrack`` without the detection-only uses of the class."""

    __slots__ = ("track_id", "state", "is_activated", "idx", "frame_id", "start_frame", "mean", "cov", "box")

    def __init__(self, track_id: int, frame_id: int, mean: np.ndarray, cov: np.ndarray,
                 idx: int) -> None:
        self.track_id, self.frame_id, self.start_frame = track_id, frame_id, frame_id
        self.mean, self.cov, self.box = mean, cov, _boxes_of(mean[None, :4])[0]
        self.idx, self.state, self.is_activated = idx, TRACKED, frame_id == 1


class _Frame:
    """One frame's detections in the forms the association steps read (float32, as ultralytics:
    its boxes pass through float64 once, where it appends an int index column)."""

    __slots__ = ("xyxy", "xyah", "score", "valid")

    def __init__(self, xyxy: np.ndarray, conf: np.ndarray) -> None:
        centre = (xyxy[:, :2] + xyxy[:, 2:]) / 2.0
        wh = xyxy[:, 2:] - xyxy[:, :2]
        tl = (centre.astype(np.float64) - wh.astype(np.float64) / 2).astype(np.float32)
        self.xyxy = np.concatenate([tl, wh + tl], axis=1)
        self.xyah = np.concatenate([tl + wh / 2, wh], axis=1)
        h = wh[:, 1]
        self.valid = (wh[:, 0] > 0) & (h > 0)  # a zero-height box would give an infinite Kalman mean
        np.divide(wh[:, 0], h, out=self.xyah[:, 2], where=h != 0)
        self.score = conf


def _track_boxes(tracks: list[_Track]) -> np.ndarray:
    """The tracks' boxes (each kept with its Kalman mean)."""
    return np.array([t.box for t in tracks]) if tracks else np.zeros((0, 4), np.float32)


def _boxes_of(mean: np.ndarray) -> np.ndarray:
    """x1y1x2y2 from Kalman means, as ultralytics' ``STrack.xyxy`` and then float32."""
    w = mean[:, 2] * mean[:, 3]
    left, top = mean[:, 0] - w / 2, mean[:, 1] - mean[:, 3] / 2
    return np.stack([left, top, w + left, mean[:, 3] + top], axis=1).astype(np.float32)


def _iou_cost(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``1 - IoU`` in float32, the operations of ultralytics' ``bbox_ioa(iou=True)``."""
    if not len(a) or not len(b):
        return 1 - np.zeros((len(a), len(b)), dtype=np.float32)
    side = np.maximum(np.minimum(a[:, None, 2:], b[None, :, 2:]) - np.maximum(a[:, None, :2], b[None, :, :2]), 0)
    inter = side[..., 0] * side[..., 1]
    area_a, area_b = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1]), (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    return 1 - inter / (area_b + area_a[:, None] - inter + 1e-7)


def _fuse(cost: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """ultralytics' ``fuse_score``: IoU similarity weighted by the detections' confidence."""
    if cost.size == 0:
        return cost
    return 1 - (1 - cost) * scores[None]


def _assign(cost: np.ndarray, thresh: float) -> tuple[list[tuple[int, int]], list[int], list[int]]:
    """ultralytics' ``linear_assignment`` with lap: matches, unmatched rows, unmatched columns."""
    if cost.size == 0:
        return [], list(range(cost.shape[0])), list(range(cost.shape[1]))
    import lap  # the solver ultralytics uses; imported here so the module loads without it

    _, x, y = lap.lapjv(cost, extend_cost=True, cost_limit=thresh)
    return ([(i, int(j)) for i, j in enumerate(x) if j >= 0], np.flatnonzero(x < 0).tolist(),
            np.flatnonzero(y < 0).tolist())


def _initiate(xyah: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """ultralytics' ``KalmanFilterXYAH.initiate`` for one measurement."""
    m = np.asarray(xyah, dtype=np.float64)
    h = m[3]
    std = [2 * _STD_POS * h, 2 * _STD_POS * h, 1e-2, 2 * _STD_POS * h,
           10 * _STD_VEL * h, 10 * _STD_VEL * h, 1e-5, 10 * _STD_VEL * h]
    return np.r_[m, np.zeros_like(m)], np.diag(np.square(std))


def _predict(tracks: list[_Track]) -> np.ndarray:
    """ultralytics' ``STrack.multi_predict`` on the pool (the velocity of a track that is not
    tracked is zeroed first); returns the pool's predicted boxes."""
    if not tracks:
        return np.zeros((0, 4), np.float32)
    mean = np.array([t.mean for t in tracks])
    cov = np.array([t.cov for t in tracks])
    still = [i for i, t in enumerate(tracks) if t.state != TRACKED]
    if still:
        mean[still, 7] = 0
    noise = np.square(mean[:, 3:4] * _NOISE)
    noise[:, 2], noise[:, 6] = np.square(1e-2), np.square(1e-5)
    new_mean = mean @ _F.T
    new_cov = _F @ cov @ _F.T
    new_cov[:, _D8, _D8] += noise
    boxes = _boxes_of(new_mean)
    for i, t in enumerate(tracks):
        t.mean, t.cov, t.box = new_mean[i], new_cov[i], boxes[i]
    return boxes


def _update(tracks: list[_Track], xyah: np.ndarray) -> None:
    """ultralytics' ``KalmanFilterXYAH.update`` for each track with its measurement, batched."""
    if not tracks:
        return
    mean = np.array([t.mean for t in tracks])
    cov = np.array([t.cov for t in tracks])
    s = cov[:, :4, :4].copy()
    var = np.square(_STD_POS * mean[:, 3])
    s[:, _D4, _D4] += np.stack([var, var, np.full_like(var, np.square(1e-1)), var], axis=1)
    gain_t = np.linalg.solve(s, cov[:, :, :4].transpose(0, 2, 1))
    new_mean = mean + ((xyah - mean[:, :4])[:, None, :] @ gain_t)[:, 0]
    new_cov = cov - gain_t.transpose(0, 2, 1) @ (s @ gain_t)
    boxes = _boxes_of(new_mean)
    for i, t in enumerate(tracks):
        t.mean, t.cov, t.box = new_mean[i], new_cov[i], boxes[i]


def _joint(a: list[_Track], b: list[_Track]) -> list[_Track]:
    ids = {t.track_id for t in a}
    return a + [t for t in b if t.track_id not in ids]


def _sub(a: list[_Track], b: list[_Track]) -> list[_Track]:
    ids = {t.track_id for t in b}
    return [t for t in a if t.track_id not in ids]


def _remove_duplicates(a: list[_Track], b: list[_Track]) -> tuple[list[_Track], list[_Track]]:
    """ultralytics' ``remove_duplicate_stracks``: of a tracked and a lost track on the same spot
    (IoU > 0.85), the younger one goes."""
    if not a or not b:
        return a, b
    drop_a, drop_b = set(), set()
    for p, q in zip(*np.where(_iou_cost(_track_boxes(a), _track_boxes(b)) < 0.15), strict=True):
        if a[p].frame_id - a[p].start_frame > b[q].frame_id - b[q].start_frame:
            drop_b.add(q)
        else:
            drop_a.add(p)
    return ([t for i, t in enumerate(a) if i not in drop_a], [t for i, t in enumerate(b) if i not in drop_b])


class ByteTrack:
    """One camera's tracker: ``update`` per frame, track ids aligned with the detections."""

    def __init__(self, options: TrackerConfig | None = None) -> None:
        self.options = options or TrackerConfig()
        self.frame_id = 0
        self.tracked: list[_Track] = []
        self.lost: list[_Track] = []
        self.removed: list[_Track] = []
        self._last_id = 0

    def update(self, xyxy: np.ndarray, conf: np.ndarray) -> list[int | None]:
        """One frame (float32 arrays: boxes ``(n, 4)`` x1y1x2y2 and confidences; ByteTrack matches
        across classes, so it needs none): the track id of each detection, or None where it is
        not (yet) a confirmed track."""
        o = self.options
        self.frame_id = f = self.frame_id + 1
        det = _Frame(xyxy, conf)
        high = np.flatnonzero(det.valid & (conf >= o.track_high_thresh)).tolist()
        low = np.flatnonzero(det.valid & (conf > o.track_low_thresh) & (conf < o.track_high_thresh)).tolist()

        activated: list[_Track] = []
        refind: list[_Track] = []
        lost: list[_Track] = []
        removed: list[_Track] = []
        matched: list[_Track] = []  # Kalman updates, deferred and batched (module docstring)
        measured: list[int] = []

        def match(track: _Track, d: int, into: list[_Track]) -> None:
            track.state, track.is_activated, track.frame_id = TRACKED, True, f
            track.idx = d
            into.append(track)
            matched.append(track)
            measured.append(d)

        unconfirmed = [t for t in self.tracked if not t.is_activated]
        pool = _joint([t for t in self.tracked if t.is_activated], self.lost)
        pool_boxes = _predict(pool)

        cost = _iou_cost(pool_boxes, det.xyxy[high])
        if o.fuse_score:
            cost = _fuse(cost, det.score[high])
        pairs, u_track, u_high = _assign(cost, o.match_thresh)
        for i, j in pairs:
            track = pool[i]
            match(track, high[j], activated if track.state == TRACKED else refind)

        rest = [i for i in u_track if pool[i].state == TRACKED]
        unmatched: Sequence[int] = range(len(rest))
        if rest and low:
            pairs, unmatched, _ = _assign(_iou_cost(pool_boxes[rest], det.xyxy[low]), 0.5)
            for i, j in pairs:
                match(pool[rest[i]], low[j], activated)
        for i in unmatched:
            pool[rest[i]].state = LOST
            lost.append(pool[rest[i]])

        left = [high[j] for j in u_high]
        new = list(range(len(left)))
        if unconfirmed:
            cost = _iou_cost(_track_boxes(unconfirmed), det.xyxy[left])
            if o.fuse_score:
                cost = _fuse(cost, det.score[left])
            pairs, u_unconfirmed, new = _assign(cost, 0.7)
            for i, j in pairs:
                match(unconfirmed[i], left[j], activated)
            for i in u_unconfirmed:
                unconfirmed[i].state = REMOVED
                removed.append(unconfirmed[i])
        for j in new:
            d = left[j]
            if det.score[d] < o.new_track_thresh:
                continue
            self._last_id += 1
            mean, cov = _initiate(det.xyah[d])
            activated.append(_Track(self._last_id, f, mean, cov, d))

        for track in self.lost:
            if f - track.frame_id > o.track_buffer:
                track.state = REMOVED
                removed.append(track)
        _update(matched, det.xyah[measured])
        self._merge(activated, refind, lost, removed)

        ids: list[int | None] = [None] * len(conf)
        for track in self.tracked:
            if track.is_activated:
                ids[track.idx] = track.track_id
        return ids

    def _merge(self, activated: list[_Track], refind: list[_Track], lost: list[_Track],
               removed: list[_Track]) -> None:
        """ultralytics' ``merge_track_pools``, in its order (a lost track removed in this frame
        leaves the lost pool only in the next one, as there)."""
        tracked = _joint(_joint([t for t in self.tracked if t.state == TRACKED], activated), refind)
        pool = _sub(_sub(self.lost, tracked) + lost, self.removed)
        self.tracked, self.lost = _remove_duplicates(tracked, pool)
        self.removed.extend(removed)
        if len(self.removed) > REMOVED_BUFFER:
            self.removed = self.removed[-REMOVED_BUFFER:]

    def boxes(self) -> list[tuple[int, np.ndarray]]:
        """The confirmed tracks' (id, x1y1x2y2) after the last frame, as ultralytics reports them."""
        live = [t for t in self.tracked if t.is_activated]
        return list(zip([t.track_id for t in live], _track_boxes(live), strict=True))
