"""Fixtures for the camera-ingest tests: a real clip, real stream servers, a supervisor that
records what its sink received.

The servers come from Debian packages (`make system-deps`): as root a missing package is a
failure, otherwise the test is skipped (tests/conftest.py ``require_system_package``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from app.ingest.frames import Frame, FrameFormat
from app.ingest.mailbox import SinkResult
from app.ingest.source import SourceSpec
from app.ingest.states import CameraState
from app.ingest.supervisor import Supervisor
from tests.conftest import require_system_package, ultralytics_asset
from tests.support.clips import WalkClip, background_without_people, make_walk_clip
from tests.support.streams import MjpegServer, RtspServer, ffmpeg_available, rtsp_server_available


@pytest.fixture(scope="session")
def stream_tools() -> None:
    require_system_package(True if ffmpeg_available() else None, "ffmpeg", "ffmpeg")
    require_system_package(True if rtsp_server_available() else None, "GStreamer RTSP server",
                           "gir1.2-gst-rtsp-server-1.0 python3-gi gstreamer1.0-plugins-{base,good,bad}")


@pytest.fixture(scope="session")
def walk_clip(tmp_path_factory, dataset, stream_tools) -> WalkClip:
    """8 s of a real person walking across a real street, 640x360 H.264 at 15 fps."""
    out = tmp_path_factory.mktemp("clips") / "walk.mp4"
    return make_walk_clip(out, background_without_people(dataset), ultralytics_asset("bus.jpg"))


@pytest.fixture(scope="session")
def slow_walk_clip(tmp_path_factory, dataset, stream_tools) -> WalkClip:
    """20 s of the same person walking slowly from 0.2 to 0.8 of the width: the real model on a
    busy CPU gets a frame every second or two, and the tracker still links his boxes."""
    out = tmp_path_factory.mktemp("clips") / "slow-walk.mp4"
    return make_walk_clip(out, background_without_people(dataset), ultralytics_asset("bus.jpg"), seconds=20,
                          walk=(0.2, 0.8))


@pytest.fixture
def rtsp_server(walk_clip) -> Iterator[RtspServer]:
    with RtspServer(walk_clip.path) as server:
        yield server


@pytest.fixture
def mjpeg_server(walk_clip) -> Iterator[MjpegServer]:
    with MjpegServer(walk_clip.path) as server:
        yield server


@dataclass
class Recorder:
    """A sink that keeps every frame (per camera) and a listener that keeps every state."""

    frames: dict[str, list[Frame]] = field(default_factory=dict)
    states: list[CameraState] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def sink_for(self, camera_id: str) -> Callable[[Frame], SinkResult]:
        def sink(frame: Frame) -> SinkResult:
            with self.lock:
                self.frames.setdefault(camera_id, []).append(frame)
            return SinkResult.sent()
        return sink

    def listener(self, state: CameraState) -> None:
        with self.lock:
            self.states.append(state)

    def count(self, camera_id: str) -> int:
        with self.lock:
            return len(self.frames.get(camera_id, []))

    def seen(self, camera_id: str) -> list[str]:
        with self.lock:
            return [s.state.value for s in self.states if s.camera_id == camera_id]


@pytest.fixture
def ingest(stream_tools) -> Iterator[Callable[..., tuple[Supervisor, Recorder]]]:
    """``ingest(sources, output=FrameFormat.JPEG, **kwargs)``: a started supervisor recording into
    a Recorder; every supervisor is stopped at the end of the test."""
    started: list[Supervisor] = []

    def start(sources: dict[str, SourceSpec], output: FrameFormat = FrameFormat.JPEG, **kwargs):
        recorder = Recorder()
        supervisor = Supervisor(recorder.sink_for, output=output, listener=recorder.listener, **kwargs)
        started.append(supervisor)
        supervisor.start(sources)
        return supervisor, recorder

    yield start
    for supervisor in started:
        supervisor.stop()

