"""Frames from real streams (GStreamer RTSP, ffmpeg MJPEG over HTTP, a looped file), and the
state a source that cannot be read ends in."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from app.ingest.frames import FrameFormat
from app.ingest.source import SourceSpec
from tests.support.streams import RtspServer
from tests.support.wait import wait_for

pytestmark = pytest.mark.streams


@pytest.mark.parametrize("kind", ["rtsp", "mjpeg", "file"])
def test_frames_arrive_at_the_sampled_rate(request, walk_clip, ingest, kind):
    url = {"rtsp": lambda: request.getfixturevalue("rtsp_server").url(),
           "mjpeg": lambda: request.getfixturevalue("mjpeg_server").url,
           "file": lambda: f"file://{walk_clip.path}"}[kind]()
    supervisor, rec = ingest({"cam": SourceSpec(url=url, fps=2, max_width=320)})
    assert wait_for(lambda: rec.count("cam") >= 1, 30), supervisor.states()["cam"]
    first = rec.count("cam")
    wait_for(lambda: False, 5)  # five seconds of streaming
    state = supervisor.states()["cam"]
    frames = rec.frames["cam"]
    assert state.state.value == "streaming" and rec.seen("cam")[:2] == ["connecting", "streaming"]
    assert 6 <= len(frames) - first <= 14  # ~10 frames in 5 s at 2 fps (loose bounds)
    assert 1.2 <= state.input_fps <= 3.0
    assert all((f.width, f.height) == (320, 180) and f.jpeg[:2] == b"\xff\xd8" for f in frames)
    gaps = [(b.captured_at - a.captured_at).total_seconds() for a, b in zip(frames, frames[1:])]
    assert min(gaps) > 0.25  # no burst of same-time frames (the connect burst is dropped)
    assert state.frames_sent == len(frames) and state.frames_read >= len(frames)


def test_embedded_format_is_an_rgb_array(rtsp_server, ingest):
    supervisor, rec = ingest({"cam": SourceSpec(url=rtsp_server.url(), fps=2)}, output=FrameFormat.RGB)
    assert wait_for(lambda: rec.count("cam") >= 2, 30), supervisor.states()["cam"]
    frame = rec.frames["cam"][-1]
    assert frame.jpeg is None and frame.rgb.shape == (360, 640, 3) and frame.rgb.dtype == np.uint8
    assert frame.rgb.std() > 20 and frame.as_jpeg()[:2] == b"\xff\xd8"


def test_wrong_url_is_unreachable_without_spinning(rtsp_server, ingest):
    sources = {"closed-port": SourceSpec(url="rtsp://127.0.0.1:1/cam"),
               "wrong-path": SourceSpec(url=rtsp_server.url().replace("/cam", "/nope")),
               "no-such-host": SourceSpec(url="http://camera.invalid/video.mjpg")}
    supervisor, rec = ingest(sources)
    assert wait_for(lambda: all(s.state.value == "unreachable" for s in supervisor.states().values()), 30), \
        supervisor.states()
    wait_for(lambda: False, 6)
    states = supervisor.states()
    assert "Connection refused" in states["closed-port"].last_error
    assert "404" in states["wrong-path"].last_error
    assert "resolve" in states["no-such-host"].last_error
    # 1 s, 2 s, 4 s between tries: a dead camera is retried a handful of times, not hundreds
    assert all(s.reconnects <= 5 for s in states.values()), {k: s.reconnects for k, s in states.items()}
    assert not any(s.frames_read for s in states.values())
    assert all(seen[0] == "connecting" and "streaming" not in seen for seen in map(rec.seen, sources))


def test_refused_credentials_are_auth_failed_and_right_ones_stream(walk_clip, ingest, tmp_path):
    with RtspServer(walk_clip.path, user="guard", password="pa:ss@w/rd") as server:
        (tmp_path / "CAM_PASSWORD").write_text("pa:ss@w/rd\n")
        sources = {"wrong": SourceSpec(url=server.url("guard", "letmein")),
                   "none": SourceSpec(url=server.url()),
                   "right": SourceSpec(url=f"rtsp://guard:${{CAM_PASSWORD}}@127.0.0.1:{server.port}/cam", fps=2)}
        supervisor, rec = ingest(sources, environ={}, secrets_dir=tmp_path)
        assert wait_for(lambda: rec.count("right") >= 1, 30), supervisor.states()["right"]
        assert wait_for(lambda: supervisor.states()["wrong"].state.value == "auth_failed", 30)
        states = supervisor.states()
        assert states["none"].state.value == "auth_failed" and "401" in states["none"].last_error
        assert states["wrong"].source == f"rtsp://***@127.0.0.1:{server.port}/cam"


def test_unreadable_file_is_a_bad_stream(tmp_path, ingest):
    junk = tmp_path / "notavideo.mp4"
    junk.write_bytes(b"this is not a video\n" * 100)
    supervisor, _ = ingest({"junk": SourceSpec(url=f"file://{junk}")})
    assert wait_for(lambda: supervisor.states()["junk"].state.value == "bad_stream", 30), supervisor.states()
    assert "Invalid data" in supervisor.states()["junk"].last_error


def test_password_never_in_a_log_record_or_a_state(walk_clip, ingest, caplog):
    password = "Tr0ub4dor&3-horse"
    caplog.set_level(logging.DEBUG)
    with RtspServer(walk_clip.path, user="guard", password=password) as server:
        sources = {"right": SourceSpec(url=f"rtsp://guard:{password}@127.0.0.1:{server.port}/cam", fps=2),
                   "wrong": SourceSpec(url=f"rtsp://guard:{password}x@127.0.0.1:{server.port}/cam"),
                   "gone": SourceSpec(url=f"rtsp://guard:{password}@127.0.0.1:1/cam?token={password}")}
        supervisor, rec = ingest(sources)
        assert wait_for(lambda: rec.count("right") >= 1 and supervisor.states()["wrong"].last_error
                        and supervisor.states()["gone"].last_error, 30)
        server.kill()  # and a failure of a stream that was running
        assert wait_for(lambda: supervisor.states()["right"].last_error, 30)
        supervisor.update({"right": sources["right"]})
        shown = json.dumps({k: s.as_dict() for k, s in supervisor.states().items()})
    records = [r.getMessage() for r in caplog.records]
    assert any("ffmpeg" in m and "***@" in m for m in records)  # the command line was logged, redacted
    assert any("401" in m for m in records) and any("Connection refused" in m for m in records)
    assert password not in shown and "guard" not in shown
    assert not [m for m in records if password in m or "guard:" in m]


@pytest.mark.skipif(Path("/dev/dri/renderD128").exists(), reason="this machine has a VAAPI device")
def test_hardware_decode_without_a_device_is_a_bad_stream(walk_clip, ingest):
    supervisor, _ = ingest({"cam": SourceSpec(url=f"file://{walk_clip.path}", hwaccel="vaapi")})
    assert wait_for(lambda: supervisor.states()["cam"].state.value == "bad_stream", 30), supervisor.states()
    assert "device" in supervisor.states()["cam"].last_error.lower()
