"""GET /cameras/{id}/frame.jpg in-process: 404s, a decodable JPEG, the size bound, newest capture wins."""

from __future__ import annotations

import datetime as dt

import cv2
import numpy as np
import pytest

from app.rules.evidence.latest import LatestFrames
from tests.support.console_util import site_app

pytestmark = pytest.mark.timeout(60)


def png(width: int, height: int, value: int) -> bytes:
    ok, buf = cv2.imencode(".png", np.full((height, width, 3), value, np.uint8))
    assert ok
    return buf.tobytes()


@pytest.fixture
def app(tmp_path):
    with site_app(tmp_path) as ip:
        yield ip


def post(client, camera: str, body: bytes, when: dt.datetime):
    r = client.post("/detect", params={"camera_id": camera, "timestamp": when.isoformat()}, content=body,
                    headers={"content-type": "image/png"})
    assert r.status_code == 200, r.text


def test_frame_404s_then_jpeg_bounded_and_newest_capture_wins(app):
    c = app.client
    assert c.get("/cameras/nope/frame.jpg").json()["error"] == "unknown_camera"
    assert c.get("/cameras/plaza-cam/frame.jpg").json()["error"] == "no_frame"
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    post(c, "plaza-cam", png(2000, 1000, 200), now - dt.timedelta(seconds=10))
    post(c, "plaza-cam", png(2000, 1000, 40), now - dt.timedelta(seconds=20))  # older capture, sent later
    r = c.get("/cameras/plaza-cam/frame.jpg")
    assert r.status_code == 200 and r.headers["content-type"] == "image/jpeg"
    assert r.headers["cache-control"] == "no-store"
    assert dt.datetime.fromisoformat(r.headers["x-frame-time"]) == now - dt.timedelta(seconds=10)
    img = cv2.imdecode(np.frombuffer(r.content, np.uint8), cv2.IMREAD_COLOR)
    assert img.shape == (640, 1280, 3) and abs(int(img.mean()) - 200) <= 2
    post(c, "plaza-cam", png(320, 240, 90), now)  # newer and small: kept as is
    img = cv2.imdecode(np.frombuffer(c.get("/cameras/plaza-cam/frame.jpg").content, np.uint8), cv2.IMREAD_COLOR)
    assert img.shape == (240, 320, 3) and abs(int(img.mean()) - 90) <= 2
    assert c.get("/cameras/gate-cam/frame.jpg").json()["error"] == "no_frame"  # per camera
    post(c, "not-configured", png(64, 48, 10), now)  # a camera outside the site file keeps nothing
    assert c.get("/cameras/not-configured/frame.jpg").json()["error"] == "unknown_camera"


def test_kept_frames_are_copies_and_forgotten_with_their_camera():
    frames = LatestFrames(max_width=100)
    buf = np.zeros((10, 50, 3), np.uint8)
    t = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    frames.keep("a", t, buf)
    buf[:] = 255  # the caller reuses its buffer
    assert frames.get("a").rgb.max() == 0
    frames.forget({"b"})
    assert frames.get("a") is None
