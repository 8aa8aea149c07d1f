"""The array ByteTrack (app/rules/logic/bytetrack.py) against ultralytics' BYTETracker.

Both trackers get the same randomized camera sequences (people walking, stopping, occluded,
leaving and coming back, jittering, low-confidence frames, duplicate and degenerate boxes,
teleports) and every frame's track ids and confirmed boxes must be identical, bit for bit.
"""

from __future__ import annotations

import subprocess
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from app.rules.logic.bytetrack import ByteTrack
from app.rules.site.schema import TrackerConfig

pytest.importorskip("lap")
from ultralytics.trackers.byte_tracker import BYTETracker  # noqa: E402


class _Boxes:
    """The slice of ultralytics' ``Boxes`` interface that BYTETracker reads."""

    def __init__(self, xyxy: np.ndarray, conf: np.ndarray, cls: np.ndarray) -> None:
        self.xyxy, self.conf, self.cls = xyxy, conf, cls

    @property
    def xywh(self) -> np.ndarray:
        return np.concatenate([(self.xyxy[:, :2] + self.xyxy[:, 2:]) / 2.0, self.xyxy[:, 2:] - self.xyxy[:, :2]], 1)

    def __len__(self) -> int:
        return len(self.conf)

    def __getitem__(self, index) -> "_Boxes":
        return _Boxes(self.xyxy[index], self.conf[index], self.cls[index])


def _reference_ids(out: np.ndarray, n: int) -> tuple[list[int | None], dict[int, np.ndarray]]:
    ids: list[int | None] = [None] * n
    boxes = {}
    for row in np.asarray(out).reshape(-1, 8) if len(out) else ():
        ids[int(row[7])] = int(row[4])
        boxes[int(row[4])] = row[:4]
    return ids, boxes


def _scene(rng: np.random.Generator, frames: int, people: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """A camera's frames: ``people`` objects with their own motion, presence and confidence."""
    w, h = 1920.0, 1080.0
    pos = rng.uniform([0, 0], [w, h], (people, 2))
    vel = rng.normal(0, 25, (people, 2)) * rng.integers(0, 2, (people, 1))  # some stand still
    size = rng.uniform([20, 40], [160, 320], (people, 2))
    present = rng.random(people) < 0.7
    cls = rng.integers(0, 3, people).astype(np.float32)
    out = []
    for _ in range(frames):
        pos += vel + rng.normal(0, 4, pos.shape)
        pos %= [w, h]
        flip = rng.random(people) < 0.08  # appear, leave, occlusion
        present ^= flip
        jump = rng.random(people) < 0.02
        pos[jump] = rng.uniform([0, 0], [w, h], (int(jump.sum()), 2))  # teleport (a detector's mix-up)
        idx = np.flatnonzero(present)
        boxes = np.concatenate([pos[idx] - size[idx] / 2, pos[idx] + size[idx] / 2], 1)
        conf = rng.choice([rng.uniform(0.3, 0.95), rng.uniform(0.11, 0.3), rng.uniform(0.0, 0.12)],
                          size=len(idx), p=[0.75, 0.2, 0.05])
        labels = cls[idx]
        if len(idx) and rng.random() < 0.1:  # a duplicate box (NMS let a near copy through)
            k = rng.integers(len(idx))
            boxes = np.vstack([boxes, boxes[k] + rng.normal(0, 2, 4)])
            conf, labels = np.append(conf, conf[k] * 0.9), np.append(labels, labels[k])
        if len(idx) and rng.random() < 0.03:  # a degenerate box: zero width or height
            k = rng.integers(len(boxes))
            boxes[k, 2 + rng.integers(2)] = boxes[k, rng.integers(2)]
        order = rng.permutation(len(boxes))
        out.append((boxes[order].astype(np.float32), conf[order].astype(np.float32),
                    labels[order].astype(np.float32)))
    return out


def _compare(options: TrackerConfig, frames) -> tuple[int, ByteTrack]:
    ours = ByteTrack(options)
    reference = BYTETracker(SimpleNamespace(**options.model_dump()))
    confirmed = 0
    for n, (xyxy, conf, cls) in enumerate(frames):
        expected, boxes = _reference_ids(reference.update(_Boxes(xyxy, conf, cls)), len(conf))
        got = ours.update(xyxy, conf)
        assert got == expected, f"frame {n + 1}: ids {got} != ultralytics {expected}"
        mine = dict(ours.boxes())
        assert mine.keys() == boxes.keys()
        for tid, box in boxes.items():
            assert np.array_equal(mine[tid], box), f"frame {n + 1}, track {tid}: {mine[tid]} != {box}"
        confirmed += sum(i is not None for i in got)
    return confirmed, ours


@pytest.mark.parametrize("seed", range(40))
def test_the_same_tracks_as_ultralytics_on_random_scenes(seed: int) -> None:
    rng = np.random.default_rng(seed)
    confirmed, _ = _compare(TrackerConfig(), _scene(rng, frames=60, people=int(rng.integers(3, 12))))
    assert confirmed > 0  # the scene did track something


@pytest.mark.parametrize("options", [
    TrackerConfig(fuse_score=False),
    TrackerConfig(track_buffer=1),
    TrackerConfig(track_buffer=3, match_thresh=0.5),
    TrackerConfig(track_high_thresh=0.6, track_low_thresh=0.2, new_track_thresh=0.7),
    TrackerConfig(track_high_thresh=0.1, track_low_thresh=0.0, new_track_thresh=0.1, match_thresh=0.95),
], ids=["no-fuse", "buffer-1", "buffer-3-strict", "high-thresholds", "low-thresholds"])
def test_the_same_tracks_as_ultralytics_with_other_settings(options: TrackerConfig) -> None:
    for seed in range(5):
        rng = np.random.default_rng(1000 + seed)
        _compare(options, _scene(rng, frames=50, people=8))


def test_the_same_tracks_past_the_removed_buffer() -> None:
    """Over 1,000 removed tracks: ultralytics' buffer of removed ids (which decides whether a
    lost track may stay lost) is kept and trimmed the same way."""
    rng = np.random.default_rng(7)
    frames = _scene(rng, frames=500, people=14)
    _, tracker = _compare(TrackerConfig(track_buffer=1), frames)
    assert len(tracker.removed) == 1000  # the buffer was filled and trimmed


def test_empty_frames_and_no_detections() -> None:
    tracker = ByteTrack()
    empty = (np.zeros((0, 4), np.float32), np.zeros(0, np.float32))
    assert tracker.update(*empty) == []
    box = (np.array([[10, 10, 60, 110]], np.float32), np.array([0.9], np.float32))
    assert tracker.update(*box) == [None]  # first seen after frame 1: not confirmed yet
    assert tracker.update(*box) == [1]
    assert tracker.update(*empty) == []
    assert tracker.update(*box) == [1]  # found again within the buffer


def test_tracking_does_not_load_ultralytics_or_torch() -> None:
    """A rules worker tracks without importing the model stack (start-up time and memory)."""
    code = ("import sys; from app.core.types import Detection; from app.rules.logic.tracking import CameraTracker; "
            "t = CameraTracker(); [t.update([Detection(0, 'person', 0.9, 10, 10, 60, 110)]) for _ in range(3)]; "
            "print(sorted(m for m in ('ultralytics', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
