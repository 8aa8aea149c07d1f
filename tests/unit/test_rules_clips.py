"""Evidence clips: the frame ring's bounds (time, rate, memory), the H.264 writer read back
with PyAV, the service writing a clip per started event off the request path, the off
switch, a failed clip, and retention deleting and budgeting clips with snapshots."""

from __future__ import annotations

import datetime as dt
import os
import shutil

import av
import cv2
import numpy as np
import pytest

from app.config import Settings
from app.core.metrics import Metrics
from app.core.types import Detection
from app.rules.evidence.framering import FrameRing
from app.rules.evidence.clips import NoClips
from app.rules.evidence.files import EvidenceFiles
from app.rules.store.retention import RetentionOptions, RetentionSweeper
from app.rules.service.facade import RulesService
from app.rules.store.db import EventStore
from app.core.timeutil import utcnow
from app.inference.vision.mp4 import write_mp4
from app.wiring import build_rules
from tests.support.rules_util import EXAMPLE_SITE, H, W, at, people
from tests.support.wait import wait_for


def noise(h: int = 360, w: int = 640, seed: int = 0) -> np.ndarray:
    """Incompressible frames, so JPEG sizes (and the memory cap) are not trivially small."""
    return np.random.default_rng(seed).integers(0, 256, (h, w, 3), dtype=np.uint8)


def read_back(path) -> tuple[str, int, int, list[float]]:
    """(codec, width, height, presentation times in s) of an MP4, decoded with PyAV."""
    with av.open(str(path)) as container:
        stream = container.streams.video[0]
        times = [round(float(f.pts * f.time_base), 3) for f in container.decode(stream)]
        return stream.codec_context.name, stream.width, stream.height, times


# --- the ring ------------------------------------------------------------------------------
def test_ring_caps_the_rate_and_refuses_out_of_order_frames():
    ring = FrameRing(horizon_s=60, max_fps=2, max_bytes=10**9)
    frame = noise(64, 64)
    kept = [ring.add("cam", at(t), frame, []) for t in (0, 0.2, 0.5, 0.9, 1.0, 0.6, 1.5)]
    assert kept == [True, False, True, False, True, False, True]
    assert [f.at for f in ring.between("cam", at(0), at(10))] == [at(0), at(0.5), at(1.0), at(1.5)]
    assert ring.between("cam", at(0.4), at(1.0)) == ring.between("cam", at(0.5), at(1.0))


def test_ring_keeps_only_its_horizon_per_camera():
    ring = FrameRing(horizon_s=3, max_fps=1, max_bytes=10**9)
    for t in range(10):
        ring.add("a", at(t), noise(32, 32), [])
    ring.add("b", at(0), noise(32, 32), [])
    assert [f.at for f in ring.between("a", at(0), at(100))] == [at(6), at(7), at(8), at(9)]
    assert ring.frames("b") == 1  # another camera's clock and horizon are its own
    ring.forget({"a"})
    assert ring.frames("b") == 0 and ring.nbytes == sum(f.nbytes for f in ring.between("a", at(0), at(100)))


def test_ring_memory_cap_drops_the_oldest_arrival_of_any_camera():
    one = FrameRing(horizon_s=600, max_fps=10, max_bytes=10**9)
    one.add("x", at(0), noise(seed=1), [])
    size = one.nbytes  # one downscaled noise frame
    ring = FrameRing(horizon_s=600, max_fps=10, max_bytes=int(size * 3.5))
    for t in range(4):
        ring.add("a", at(t), noise(seed=t), [])
        ring.add("b", at(100 + t), noise(seed=10 + t), [])
    assert ring.nbytes <= ring.max_bytes
    kept = [(cid, f.at) for cid in ("a", "b") for f in ring.between(cid, at(0), at(1000))]
    # arrival order was a0 b0 a1 b1 a2 b2 a3 b3: the three last ones fit
    assert sorted(kept) == [("a", at(3)), ("b", at(102)), ("b", at(103))]


def test_ring_downscales_to_even_sides_and_scales_the_boxes():
    ring = FrameRing(horizon_s=60, max_fps=5, max_bytes=10**9, max_width=321)
    box = Detection(0, "person", 0.9, 100.0, 50.0, 500.0, 250.0)
    ring.add("cam", at(0), noise(501, 999), [box], [("plaza", "crowd")])
    (kept,) = ring.between("cam", at(0), at(0))
    small = cv2.imdecode(np.frombuffer(kept.jpeg, np.uint8), cv2.IMREAD_COLOR)
    assert small.shape == (160, 320, 3) and kept.size == (320, 160) and len(kept.jpeg) < 999 * 501 * 3 / 4
    d = kept.detections[0]
    assert (round(d.x1), round(d.y1), round(d.x2), round(d.y2)) == (32, 16, 160, 80)
    assert kept.alerts == (("plaza", "crowd"),)


# --- the writer ----------------------------------------------------------------------------
def test_write_mp4_is_h264_with_the_frames_capture_times(tmp_path):
    times = [0, 0.4, 0.8, 3.0, 3.2]  # a camera that paused: the gap stays in the clip
    n = write_mp4(tmp_path / "c.mp4", ((at(t), noise(120, 160, seed=i)) for i, t in enumerate(times)))
    assert n == 5
    assert read_back(tmp_path / "c.mp4") == ("h264", 160, 120, [0.0, 0.4, 0.8, 3.0, 3.2])
    with pytest.raises(ValueError):
        write_mp4(tmp_path / "empty.mp4", [])


# --- the service ---------------------------------------------------------------------------
@pytest.fixture
def make(tmp_path):
    made = []

    def factory(**settings) -> RulesService:
        path = tmp_path / "site.yaml"
        shutil.copy(EXAMPLE_SITE, path)
        s = Settings(site_config=path, events_db_url=f"sqlite:///{tmp_path}/events.db",
                     snapshot_dir=tmp_path / "snaps", **settings)
        svc = build_rules(s, Metrics())
        made.append(svc)
        return svc

    yield factory
    for svc in made:
        svc.stop()


def frame(t: float) -> np.ndarray:
    return np.full((H, W, 3), int(t * 7) % 256, np.uint8)


def crowd(svc: RulesService, seconds, step: float = 0.5) -> list[dict]:
    """Frames of plaza-cam with a crowd (its rule starts an event after 10 s) at ``step`` s."""
    got = []
    for i in range(int(seconds / step)):
        t = i * step
        got += svc.evaluate("plaza-cam", at(t), (W, H), people(4), frame(t))
    return got


def test_a_started_event_gets_its_clip_after_post_seconds(make):
    svc = make(clip_pre_s=3, clip_post_s=2, clip_max_fps=1, clip_max_width=200)
    events = crowd(svc, 11)  # frames 0 .. 10.5 s every 0.5 s; the event starts at 10 s
    (ev,) = events
    assert ev["clip"] == f"/events/{ev['id']}/clip.mp4" and svc.get_event(ev["id"])["clip"] == ev["clip"]
    assert svc.clips.write_due() == 0 and svc.clip_path(ev["id"]) is None  # not due: post_s not reached
    for t in (11.0, 11.5, 12.0):  # the frame at start + 2 s makes it due
        svc.evaluate("plaza-cam", at(t), (W, H), people(4), frame(t))
    assert svc.clips.write_due() == 1
    codec, w, h, times = read_back(svc.clip_path(ev["id"]))
    # 1 fps kept: 7, 8, 9, 10 (start), 11, 12 -> from start - 3 s to start + 2 s
    assert (codec, w, h, times) == ("h264", 200, 200, [0.0, 1.0, 2.0, 3.0, 4.0, 5.0])


def test_an_event_that_ends_early_cuts_its_clip_there(make):
    svc = make(clip_pre_s=1, clip_post_s=60, clip_max_fps=2)
    (ev,) = crowd(svc, 10.5)
    for t in (10.5, 11.0, 11.5, 12.0, 12.5, 13.0):  # empty from 10.5 s; clear_after 2 s ends it at 12.5 s
        for ended in svc.evaluate("plaza-cam", at(t), (W, H), [], frame(t)):
            assert ended["state"] == "ended" and ended["clip"] == ev["clip"]
    assert svc.clips.write_due() == 1
    ended_at = dt.datetime.fromisoformat(svc.get_event(ev["id"])["ended_at"].replace("Z", "+00:00"))
    assert ended_at < at(10 + 60)
    times = read_back(svc.clip_path(ev["id"]))[3]  # 2 fps from start - 1 s to the end
    assert times == [i * 0.5 for i in range(int((ended_at - at(9)).total_seconds() * 2) + 1)]


def test_the_clip_thread_writes_without_more_frames(make, monkeypatch):
    monkeypatch.setattr("app.rules.evidence.clips.QUIET_GRACE_S", 0.0)
    svc = make(clip_pre_s=2, clip_post_s=0.5)
    svc.start()
    (ev,) = crowd(svc, 10.5)  # the camera stops right after the start
    assert wait_for(lambda: svc.clip_path(ev["id"]) is not None, timeout=10)
    assert read_back(svc.clip_path(ev["id"]))[0] == "h264"


def test_a_camera_that_changes_resolution_keeps_the_first_size(make):
    svc = make(clip_pre_s=2, clip_post_s=1, clip_max_width=400)
    (ev,) = crowd(svc, 10.5)  # 1000 x 1000 frames, kept at 400 x 400
    svc.evaluate("plaza-cam", at(10.5), (W, H), people(4), noise(300, 800))  # kept at 400 x 150
    svc.evaluate("plaza-cam", at(11), (W, H), people(4), frame(11))
    assert svc.clips.write_due() == 1
    codec, w, h, times = read_back(svc.clip_path(ev["id"]))
    assert (codec, w, h, len(times)) == ("h264", 400, 400, 7)


def test_a_frame_the_ring_cannot_keep_does_not_fail_the_frame(make):
    svc = make()
    assert svc.evaluate("plaza-cam", at(0), (W, H), people(4), np.zeros((0, 0, 3), np.uint8)) == []
    assert svc.clips.ring.frames("plaza-cam") == 0


def test_clips_off_means_no_clip(make):
    svc = make(clips=False)
    assert isinstance(svc.clips, NoClips)
    (ev,) = crowd(svc, 10.5)
    assert ev["clip"] is None and ev["snapshot"] is not None


def test_a_clip_that_cannot_be_written_is_forgotten(make, tmp_path):
    svc = make(clip_post_s=0)
    (ev,) = crowd(svc, 10.5)
    svc.clips.files = EvidenceFiles(tmp_path / "a-file")
    svc.clips.files.folder.write_bytes(b"")  # mkdir fails
    assert svc.clips.write_due(everything=True) == 0
    assert svc.get_event(ev["id"])["clip"] is None
    ended = []
    for t in (10.5, 11, 11.5, 12, 12.5, 13):
        ended += svc.evaluate("plaza-cam", at(t), (W, H), [], frame(t))
    assert ended[0]["clip"] is None and svc.get_event(ev["id"])["clip"] is None


# --- retention -----------------------------------------------------------------------------
def test_retention_deletes_clips_with_their_events_and_counts_them_in_the_budget(db_url, tmp_path):
    snaps = tmp_path / "snaps"
    snaps.mkdir()
    store = EventStore(db_url)
    now = utcnow()
    try:
        for event_id, age in (("old", 40), ("mid", 5), ("new", 1)):
            ended = now - dt.timedelta(days=age)
            store.events.record({"id": event_id, "camera_id": "cam", "zone": "z", "rule": "crowd", "rule_type": "crowd",
                          "started_at": ended.isoformat(), "ended_at": ended.isoformat(), "objects": [],
                          "max_count": 1, "snapshot": f"/events/{event_id}/snapshot",
                          "clip": f"/events/{event_id}/clip.mp4"})
            for suffix, size in ((".jpg", 100), (".mp4", 1000)):
                path = snaps / f"{event_id}{suffix}"
                path.write_bytes(b"x" * size)
                os.utime(path, (ended.timestamp() + size,) * 2)
        got = RetentionSweeper(store, EvidenceFiles(snaps), RetentionOptions(retain_days=30, budget_bytes=1500),
                               Metrics()).sweep()
        assert got == {"events": 1, "snapshots_expired": 2, "snapshots_over_budget": 2, "frames": 0, "audit": 0,
                       "crossings": 0}
        # mid.jpg (100 B) then mid.mp4 (1000 B) go over the budget; new's 1100 B stay
        assert sorted(p.name for p in snaps.iterdir()) == ["new.jpg", "new.mp4"]
        assert store.events.get("mid")["clip"] is None and store.events.get("mid")["snapshot"] is None
        assert store.events.get("new")["clip"] == "/events/new/clip.mp4"
    finally:
        store.close()
