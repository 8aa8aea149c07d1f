"""`campusguard demo` (issue #24, "The first run"): the clip it makes from bus.jpg alone and the
camera it adds are what a newcomer needs to see: the real model finds the walker in every
frame the demo samples (2 fps), and the service's own rules over those detections raise a
line crossing (``in``) and an intrusion in the zone he walks into, within one loop of the clip.
"""

from __future__ import annotations

import datetime as dt
from urllib.parse import urlsplit

import cv2
import pytest

from app.commands.demo import CLIP_SECONDS, prepare
from app.commands.serve import starter_site
from app.config import Settings
from app.inference.pipeline import DetectParams
from app.rules.logic.evaluator import CameraRules
from app.rules.site.loader import load_site_config
from app.tooling.demo.site import DEMO_CAMERA
from app.wiring import build_pipeline

pytestmark = pytest.mark.slow
T0 = dt.datetime(2026, 12, 4, 12, 0, tzinfo=dt.timezone.utc)


def sampled(path, fps: float) -> list:
    """The clip's frames at ``fps`` (what the demo camera's reader sends), RGB."""
    capture = cv2.VideoCapture(str(path))
    native = capture.get(cv2.CAP_PROP_FPS)
    frames, index = [], 0
    while True:
        ok, bgr = capture.read()
        if not ok:
            break
        if index == round(len(frames) * native / fps):  # the frame nearest each sampling instant
            frames.append(cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB))
        index += 1
    capture.release()
    return frames


def test_demo_camera_shows_a_crossing_and_an_intrusion(tmp_path, weights, stream_tools):
    settings = Settings(_env_file=None, data_dir=tmp_path / "data", weights=weights, imgsz=320, threads=2)
    site = starter_site(settings)
    done = prepare(settings.data_dir, site)
    assert "(made now)" in done["clip"] and "(demo-cam added)" in done["site file"]
    assert prepare(settings.data_dir, site) == {"site file": str(site), "clip": str(settings.data_dir / "demo/walk.mp4")}
    config = load_site_config(site)
    assert [c.id for c in config.cameras] == ["front-door", DEMO_CAMERA]  # the starter camera stays
    camera = config.cameras[1]
    clip = urlsplit(camera.source.url).path
    frames = sampled(clip, camera.source.fps)
    assert len(frames) == round(CLIP_SECONDS * camera.source.fps)

    detections = build_pipeline(settings).detect(frames, DetectParams(conf=0.25))
    people = [[d for d in dets if d.class_name == "person"] for dets in detections]
    assert all(len(p) == 1 for p in people), [len(p) for p in people]  # the walker, every frame, nobody else

    rules = CameraRules(camera, config)
    events = []
    for i, (image, dets) in enumerate(zip(frames, detections)):
        when = T0 + dt.timedelta(seconds=i / camera.source.fps)
        events += [tr.apply() for tr in rules.evaluate(when, (image.shape[1], image.shape[0]), dets)
                   if tr.kind == "started"]
    assert [(e.zone, e.rule) for e in events] == [("walkway", "crossing"), ("lawn", "intrusion")]
    assert events[0].objects[0]["direction"] == "in"
    assert (events[1].started_at - T0).total_seconds() < CLIP_SECONDS  # within one loop
