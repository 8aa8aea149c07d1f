"""The embedded hosting's mechanics without a model: a frame reaches the engine and the camera's
rules exactly as a POST would (the capture-time policy first, the engine's admission, the rules'
camera health), and the site file is refused before start when this process could not pull
it (startup exit 2, the field named); with ingest off a replica needs no camera password.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from app.config import Settings
from app.core.errors import ConfigError
from app.core.metrics import Metrics
from app.core.slot import Slot
from app.flow.models import ModelRouter
from app.inference.modelset import ModelSet
from app.inference.pipeline import DetectParams, Pipeline
from app.ingest.asyncsink import AsyncSink
from app.ingest.embedded import EngineFeed
from app.ingest.frames import Frame
from app.ingest.mailbox import SinkResult
from app.wiring import build_engine, build_flow, build_rules, check_site
from tests.support.fakes import FakeDetector
from tests.support.inprocess import IMGSZ, SCENE, scene_detector
from tests.support.rules_util import EXAMPLE_SITE

REPO = Path(__file__).resolve().parents[2]
BAD_VAR_SITE = "cameras:\n  - id: gate-cam\n    source: {url: 'rtsp://admin:${GATE_PW_NOWHERE}@10.0.0.5/x'}\n"


def settings(tmp: Path, **extra) -> Settings:
    return Settings(_env_file=None, imgsz=IMGSZ, threads=1, preprocess_workers=1, warmup_iters=0,
                    events_db_url=f"sqlite:///{tmp}/e.db", snapshot_dir=tmp / "snaps", **extra)


@pytest.fixture
def loop():
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join(5)
    loop.close()


def frame(camera: str, at: dt.datetime) -> Frame:
    return Frame(camera, at, 64, 48, rgb=np.full((48, 64, 3), 90, np.uint8))


def test_a_frame_feeds_engine_and_rules_as_if_posted(tmp_path, loop):
    s = settings(tmp_path, site_config=EXAMPLE_SITE)
    metrics = Metrics()
    rules = build_rules(s, metrics)
    engine = None
    try:
        engine = build_engine(s, Pipeline(scene_detector(), 0, s.max_pixels), metrics)
        models = ModelRouter(ModelSet.single("default"))
        sink = AsyncSink(loop, EngineFeed(build_flow(rules, metrics, models), DetectParams()))
        now = dt.datetime.now(dt.timezone.utc)
        assert sink(frame("plaza-cam", now)) == SinkResult.busy(1.0, "not_ready")  # still loading
        models.models.get("default").slot.put(engine)
        engine.start()
        assert sink(frame("plaza-cam", now)) == SinkResult.busy(1.0, "not_ready")  # loaded, not warm yet
        engine.mark_ready()
        assert sink(frame("plaza-cam", now)) == SinkResult.sent()
        camera = rules.camera("plaza-cam")
        assert camera["status"] == "online" and camera["last_frame_at"] == now  # the capture time, as ?timestamp=
        assert 'camera_id="plaza-cam",class_name="person"' in metrics.render().decode()  # counted like a request
        # the capture-time policy sees it first: a frame two days old is dropped and counted per camera
        old = sink(frame("plaza-cam", now - dt.timedelta(days=2)))
        assert old == SinkResult.dropped("invalid_timestamp")
        assert 'campusguard_invalid_timestamps_total{camera_id="plaza-cam",reason="past"} 1.0' in metrics.render().decode()
        assert rules.camera("plaza-cam")["last_frame_at"] == now
        engine.begin_drain()
        assert sink(frame("plaza-cam", now)) == SinkResult.busy(1.0, "shutting_down")
    finally:
        if engine is not None:
            engine.stop()
        rules.stop()


def test_pulled_frames_are_counted_in_the_recent_traffic_as_pulled(tmp_path, loop):
    """Issue 42: during `make demo` the status page read "Last 10 s: 0 images" while the demo camera
    streamed. A pulled frame is an image of the recent window, marked pulled (no request); a frame
    refused for its capture time is not an image, and a refusal while draining is an error."""
    s = settings(tmp_path, site_config=EXAMPLE_SITE)
    metrics = Metrics()
    rules = build_rules(s, metrics)
    engine = None
    try:
        engine = build_engine(s, Pipeline(scene_detector(), 0, s.max_pixels), metrics)
        engine.start()
        engine.mark_ready()
        sink = AsyncSink(loop, EngineFeed(build_flow(rules, metrics, lambda: engine), DetectParams()))
        now = dt.datetime.now(dt.timezone.utc)
        for i in range(3):
            assert sink(frame("plaza-cam", now + dt.timedelta(milliseconds=500 * i))) == SinkResult.sent()
        assert sink(frame("plaza-cam", now - dt.timedelta(days=2))) == SinkResult.dropped("invalid_timestamp")

        def totals() -> tuple[int, ...]:
            snap = metrics.recent.snapshot()
            return tuple(sum(b[k] for b in snap) for k in ("requests", "images", "pulled", "errors"))

        assert totals() == (0, 3, 3, 0)
        assert any(b["p50_ms"] is not None for b in metrics.recent.snapshot())
        engine.begin_drain()
        assert sink(frame("plaza-cam", now + dt.timedelta(seconds=2))) == SinkResult.busy(1.0, "shutting_down")
        assert totals() == (0, 3, 3, 1)
    finally:
        if engine is not None:
            engine.stop()
        rules.stop()


def test_check_site_needs_the_variables_only_where_ingest_runs(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(BAD_VAR_SITE)
    with pytest.raises(ConfigError) as info:
        check_site(settings(tmp_path, site_config=site))
    assert info.value.code == "invalid_site_config"
    assert "cameras[0].source.url: ${GATE_PW_NOWHERE} is not defined" in info.value.message
    check_site(settings(tmp_path, site_config=site, ingest="off"))  # a replica behind gateways: fine
    secrets = tmp_path / "secrets"
    secrets.mkdir()
    (secrets / "GATE_PW_NOWHERE").write_text("pw\n")
    check_site(settings(tmp_path, site_config=site, secrets_dir=secrets))


@pytest.mark.parametrize("text, words", [
    (BAD_VAR_SITE, "cameras[0].source.url: ${GATE_PW_NOWHERE} is not defined"),
    ("cameras:\n  - id: gate-cam\n    source: {url: 'gopher://x/y'}\n", "cameras[0].source.url: unsupported scheme"),
    ("cameras:\n  - id: gate-cam\n    source: {url: 'rtsp://x/y', fps: 0}\n", "cameras[0].source.fps: Input should be"),
])
def test_serve_exits_2_with_the_field_named(tmp_path, text, words):
    site = tmp_path / "site.yaml"
    site.write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPUSGUARD_")}
    env.update(CAMPUSGUARD_SITE_CONFIG=str(site), CAMPUSGUARD_DATA_DIR=str(tmp_path / "data"))
    done = subprocess.run([sys.executable, "-m", "app.cli", "serve", "--port", "9"], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stderr[-2000:]
    assert words in done.stderr


def test_starter_site_is_created_once_and_valid(tmp_path):
    from app.commands.serve import starter_site
    from app.rules.site.loader import load_site_config

    s = Settings(_env_file=None, data_dir=tmp_path / "data")
    path = starter_site(s)
    assert path == tmp_path / "data" / "site.yaml"
    config = load_site_config(path)
    assert [c.id for c in config.cameras] == ["front-door"] and config.cameras[0].zones
    path.write_text(path.read_text() + "# mine\n")
    assert starter_site(s) == path and path.read_text().endswith("# mine\n")  # never overwritten
    assert s.events_db_url == f"sqlite:///{tmp_path / 'data' / 'events.db'}"  # one setting for the data folder
    assert s.snapshot_dir == tmp_path / "data" / "snapshots"
    shutil.rmtree(tmp_path / "data")


def test_make_demo_says_how_to_remove_the_camera_it_adds(tmp_path):
    """`make demo` adds demo-cam to the site file for good (issue 42): when it adds it, its
    summary says how to take it out; a second run, which adds nothing, says nothing of it."""
    from app.commands.demo import prepare
    from app.commands.serve import starter_site
    from app.rules.site.loader import load_site_config
    from app.tooling.demo.site import DEMO_CAMERA

    s = Settings(_env_file=None, data_dir=tmp_path / "data")
    site = starter_site(s)
    (tmp_path / "data" / "demo").mkdir()
    (tmp_path / "data" / "demo" / "walk.mp4").write_bytes(b"made before")  # no clip to make here
    done = prepare(s.data_dir, site)
    assert "(demo-cam added)" in done["site file"]
    hint = done["to remove it"]
    assert str(site) in hint and f"- id: {DEMO_CAMERA}" in hint and "delete the file" in hint
    assert "to remove it" not in prepare(s.data_dir, site)
    # the advice works: without the block it names, the site is the starter's again
    text = site.read_text()
    block = text[text.index(f"- id: {DEMO_CAMERA}"):]
    site.write_text(text.replace(block, "").rstrip() + "\n")
    assert [c.id for c in load_site_config(site).cameras] == ["front-door"]


class BlindToCars(FakeDetector):
    """A reference that misses the car the primary reports, and remembers each batch it ran on."""

    def __init__(self) -> None:
        super().__init__(**SCENE)  # the base records self.batches

    def infer(self, batch: np.ndarray) -> np.ndarray:
        out = super().infer(batch)
        out[:, 5, 1] = 0.0
        return out


def test_a_pulled_frame_is_offered_to_the_shadow_lane_full_size_per_camera(tmp_path, loop):
    """The reference gets the reader's full-size RGB array (its own letterbox, no reduced
    decode), sampled per camera like the routes: here only the per-camera floor samples."""
    from app.inference.pipeline import DecodePolicy
    from app.inference.shadow.book import AgreementBook
    from app.inference.shadow.lane import ShadowLane, ShadowOptions
    from app.inference.shadow.worst import WorstFrames

    s = settings(tmp_path, site_config=EXAMPLE_SITE)
    metrics = Metrics()
    rules = build_rules(s, metrics)
    engine = build_engine(s, Pipeline(scene_detector(), 0, s.max_pixels), metrics)
    reference = BlindToCars()
    options = ShadowOptions(sample=0.0, min_interval_s=3600.0, queue_size=8)
    lane = ShadowLane(Pipeline(reference, 0, decode=DecodePolicy(reduce=False)), options, AgreementBook(900.0),
                      WorstFrames(5, 10, 900.0), idle=lambda: engine.idle, label=metrics.camera_label)
    try:
        engine.start()
        engine.mark_ready()
        lane.start()
        models = ModelRouter(ModelSet.single("default", slot=Slot(engine)))
        sink = AsyncSink(loop, EngineFeed(build_flow(rules, metrics, models, lambda: lane), DetectParams()))
        now = dt.datetime.now(dt.timezone.utc)
        big = np.full((720, 1280, 3), 90, np.uint8)
        for camera in ("plaza-cam", "plaza-cam", "plaza-cam", "gate-cam"):
            pulled = Frame(camera, now, 1280, 720, rgb=big.copy())
            assert sink(pulled) == SinkResult.sent()
        assert lane.drain(30)
        compared, sampled, dropped = lane.book.counters()
        assert sampled == 2 and compared == {"plaza-cam": 1, "gate-cam": 1} and not any(dropped.values())
        assert len(reference.batches) == 2 and reference.batches[0][0] == 1  # one frame per reference run
        plaza = lane.book.summary("plaza-cam")
        assert (plaza.frames, plaza.recall, plaza.precision) == (1, 1.0, 0.5)  # scored per camera
        kept = lane.worst.listing("plaza-cam")
        assert [(f.width, f.height) for f in kept] == [(1280, 720)]  # the full-size frame, not a reduced one
        assert {b[5] for b in kept[0].primary} == {0.0, 1.0} and {b[5] for b in kept[0].reference} == {0.0}
    finally:
        engine.begin_drain()
        engine.stop()
        lane.stop()
        rules.stop()


def test_the_first_run_says_where_the_console_is_and_what_to_post(tmp_path):
    """`make run` prints the console's address and the curl call that raises an event on the
    starter camera, with the real path of the bus.jpg that ships with Ultralytics (issue 42)."""
    import re

    from app.tooling.demo.site import next_steps

    text = next_steps("127.0.0.1", 8123)
    assert "console: http://127.0.0.1:8123/ui" in text
    path = re.search(r"image=@(\S+) 'http://127\.0\.0\.1:8123/detect\?camera_id=front-door'", text)
    assert path is not None and Path(path.group(1)).is_file() and path.group(1).endswith("bus.jpg")
    assert "make demo" in text
    assert "http://127.0.0.1:9000/ui" in next_steps("0.0.0.0", 9000)  # never an unreachable 0.0.0.0 link
