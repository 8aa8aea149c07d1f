"""Hostile streams (issue 42, finding 3): the pixel cap (ffmpeg's ``-max_pixels`` and a check of
every frame read), ``bad_stream`` for a picture over it and for garbage, and a bound on the
readers of one process. One small real stream (a 3000x2000 MJPEG file against a cap of 1 MP),
never an 800 MiB run."""

from __future__ import annotations

import os
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from app.ingest import watchdog
from app.ingest.classify import explain
from app.ingest.command import DEFAULT_MAX_PIXELS, build_command
from app.ingest.embedded import check_sources
from app.ingest.frames import FrameFormat
from app.ingest.source import SourceError, SourceSpec
from app.ingest.states import SourceState
from app.ingest.supervisor import Supervisor
from app.rules.site.loader import SiteConfigError, parse_site_text
from tests.ingest.conftest import Recorder
from tests.support.streams import ffmpeg_available
from tests.support.wait import wait_for

CAP = 1_000_000


def test_every_reader_runs_with_the_pixel_cap():
    argv = build_command("rtsp://10.0.0.5/x", SourceSpec(url="rtsp://10.0.0.5/x"), FrameFormat.JPEG, max_pixels=CAP)
    assert argv[argv.index("-max_pixels") + 1] == str(CAP) and argv.index("-max_pixels") < argv.index("-i")
    argv = build_command("rtsp://10.0.0.5/x", SourceSpec(url="rtsp://10.0.0.5/x"), FrameFormat.RGB)
    assert argv[argv.index("-max_pixels") + 1] == str(DEFAULT_MAX_PIXELS)


@pytest.mark.parametrize("lines", [
    ["[mjpeg @ 0x55a8] [IMGUTILS @ 0x7fff] Picture size 16000x16000 exceeds specified max pixel count 1000000, "
     "see the documentation if you wish to increase it"],
    ["garbage.bin: Invalid data found when processing input"],
    ["[mjpeg @ 0x55a8] [IMGUTILS @ 0x7fff] Picture size 0x0 is invalid"],
])
def test_ffmpeg_refusing_a_picture_or_garbage_says_bad_stream(lines):
    assert explain(lines)[0] is SourceState.BAD_STREAM
    assert explain([*lines, "Error while decoding stream #0:0: Operation not permitted"])[0] is SourceState.BAD_STREAM


def test_more_sources_than_the_readers_bound_are_refused_with_a_clear_error():
    site = "cameras:\n" + "".join(f"  - id: cam-{i}\n    source: {{url: 'rtsp://10.0.0.{i}/x'}}\n" for i in range(3))
    with pytest.raises(SiteConfigError, match=r"3 camera sources in this process, more than "
                                              r"CAMPUSGUARD_INGEST_MAX_READERS \(2\)"):
        check_sources(parse_site_text(site), None, "site.yaml", {}, max_readers=2)
    supervisor = Supervisor(Recorder().sink_for, max_readers=2)
    sources = {f"cam-{i}": SourceSpec(url=f"rtsp://10.0.0.{i}/x") for i in range(3)}
    with pytest.raises(SourceError, match="CAMPUSGUARD_INGEST_MAX_READERS"):
        supervisor.update(sources)
    assert supervisor.states() == {}  # nothing started


@pytest.fixture(scope="module")
def big_mjpeg(tmp_path_factory) -> Path:
    if not ffmpeg_available():
        pytest.skip("ffmpeg is not installed")
    out = tmp_path_factory.mktemp("big") / "big.mjpeg"
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                    "color=c=red:s=3000x2000:d=2", "-r", "2", "-c:v", "mjpeg", "-f", "mjpeg", str(out)],
                   check=True, timeout=120)
    return out


def pull(path: Path, monkeypatch=None) -> tuple[Supervisor, dict]:
    recorder = Recorder()
    supervisor = Supervisor(recorder.sink_for, output=FrameFormat.JPEG, listener=recorder.listener, max_pixels=CAP)
    supervisor.start({"big-cam": SourceSpec(url=f"file://{path}", stall_after_s=3, max_width=7680)})
    try:
        assert wait_for(lambda: supervisor.states()["big-cam"].state is SourceState.BAD_STREAM, 30), \
            supervisor.states()["big-cam"]
        return supervisor, {"frames": recorder.count("big-cam"), "state": supervisor.states()["big-cam"]}
    finally:
        supervisor.stop()


@pytest.mark.streams
def test_a_picture_over_the_cap_is_bad_stream_and_never_reaches_detection(big_mjpeg):
    _, seen = pull(big_mjpeg)
    assert seen["frames"] == 0
    assert "Picture size 3000x2000 exceeds specified max pixel count 1000000" in seen["state"].last_error


@pytest.mark.streams
def test_the_frame_size_read_from_the_pipe_is_checked_too(big_mjpeg, monkeypatch):
    """Without ffmpeg's cap (an ffmpeg that ignores it), the reader's own check refuses the frame."""
    real = watchdog.build_command

    def without_cap(*args, **kwargs):
        argv = real(*args, **kwargs)
        at = argv.index("-max_pixels")
        return argv[:at] + argv[at + 2:]

    monkeypatch.setattr(watchdog, "build_command", without_cap)
    _, seen = pull(big_mjpeg)
    assert seen["frames"] == 0
    assert seen["state"].last_error == f"a frame of 3000x2000 is over CAMPUSGUARD_INGEST_MAX_PIXELS ({CAP})"


def test_the_cap_and_the_bound_are_settings():
    from app.config import Settings
    s = Settings()
    assert (s.ingest_max_pixels, s.ingest_max_readers) == (DEFAULT_MAX_PIXELS, 64)
    with pytest.raises(ValueError):
        Settings(ingest_max_pixels=10)


class _Garbage(BaseHTTPRequestHandler):
    """A "camera" that answers 200 with a well-formed MJPEG stream whose pictures are garbage
    (what a hostile host, or a broken encoder, sends): ffmpeg keeps reading and never decodes."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.send_response(200)
        self.send_header("Content-Type", "multipart/x-mixed-replace; boundary=frame")
        self.end_headers()
        try:
            for _ in range(100):
                jpeg = b"\xff\xd8\xff\xdb" + os.urandom(8_192) + b"\xff\xd9"
                self.wfile.write(b"--frame\r\nContent-Type: image/jpeg\r\nContent-Length: "
                                 + str(len(jpeg)).encode() + b"\r\n\r\n" + jpeg + b"\r\n")
                time.sleep(0.1)
        except OSError:
            pass

    def log_message(self, *args) -> None:
        pass


@pytest.mark.streams
def test_a_garbage_stream_is_bad_stream_not_unreachable():
    if not ffmpeg_available():
        pytest.skip("ffmpeg is not installed")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Garbage)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    recorder = Recorder()
    supervisor = Supervisor(recorder.sink_for, output=FrameFormat.JPEG, listener=recorder.listener)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/video.mjpg"
        supervisor.start({"junk-cam": SourceSpec(url=url, stall_after_s=3)})
        assert wait_for(lambda: supervisor.states()["junk-cam"].state not in
                        (SourceState.CONNECTING, SourceState.STREAMING), 30)
        seen = supervisor.states()["junk-cam"]
        assert seen.state is SourceState.BAD_STREAM, seen
        assert recorder.count("junk-cam") == 0
    finally:
        supervisor.stop()
        server.shutdown()
