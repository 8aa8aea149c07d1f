"""The faults of issue #24 against a real RTSP server: an outage, a frozen stream, a reload
that adds, changes and removes cameras."""

from __future__ import annotations

import time

import pytest

from app.ingest.source import SourceSpec
from tests.support.streams import RtspServer, process_alive
from tests.support.wait import wait_for

pytestmark = pytest.mark.streams


def test_server_killed_for_15_s_then_frames_within_10_s_of_its_return(walk_clip, ingest):
    # max_backoff_s 8: with the default 30 a retry may fall up to 30 s after the return
    # (the backoff is what keeps a dead camera cheap); docs/cameras.md says so.
    server = RtspServer(walk_clip.path).start()
    try:
        supervisor, rec = ingest({"cam": SourceSpec(url=server.url(), fps=2, max_backoff_s=8)})
        assert wait_for(lambda: rec.count("cam") >= 2, 30), supervisor.states()
        server.kill()
        time.sleep(15)
        down = supervisor.states()["cam"]
        assert down.state.value in ("unreachable", "backoff") and down.reconnects >= 2
        before = rec.count("cam")
        server = RtspServer(walk_clip.path, port=server.port).start()
        assert wait_for(lambda: rec.count("cam") > before, 10), supervisor.states()
        assert supervisor.states()["cam"].state.value == "streaming"
    finally:
        server.kill()


def test_frozen_stream_is_restarted_by_the_watchdog(rtsp_server, ingest):
    supervisor, rec = ingest({"cam": SourceSpec(url=rtsp_server.url(), fps=2, stall_after_s=3)})
    assert wait_for(lambda: rec.count("cam") >= 2, 30), supervisor.states()
    first_pid = supervisor.pids()["cam"]
    rtsp_server.freeze()  # SIGSTOP: the TCP connection stays open, nothing more comes
    try:
        assert wait_for(lambda: "stalled" in rec.seen("cam"), 3 + 10), supervisor.states()
        stalled = supervisor.states()["cam"]
        assert stalled.reconnects == 0 and stalled.last_error == "no frame for 3 s"
        assert not process_alive(first_pid)  # the stuck ffmpeg was killed and reaped
        assert wait_for(lambda: supervisor.states()["cam"].reconnects >= 1, 5)
    finally:
        rtsp_server.thaw()
    before = rec.count("cam")
    assert wait_for(lambda: rec.count("cam") > before, 30), supervisor.states()
    assert supervisor.pids()["cam"] != first_pid


def test_update_adds_restarts_and_stops_readers(rtsp_server, walk_clip, ingest):
    a, b = SourceSpec(url=rtsp_server.url(), fps=2), SourceSpec(url=f"file://{walk_clip.path}", fps=2)
    supervisor, rec = ingest({"a": a, "b": b})
    assert wait_for(lambda: all(supervisor.pids().values()) and rec.count("a") and rec.count("b"), 30)
    pids = supervisor.pids()
    summary = supervisor.update({"a": a, "b": b.model_copy(update={"fps": 1}), "c": b})
    assert (summary.started, summary.restarted, summary.stopped) == (("c",), ("b",), ())
    assert not process_alive(pids["b"]) and supervisor.pids()["a"] == pids["a"]
    assert wait_for(lambda: rec.count("c") >= 1, 30)
    pids = supervisor.pids()
    summary = supervisor.update({"c": b})
    assert summary.stopped == ("a", "b")
    assert not process_alive(pids["a"]) and not process_alive(pids["b"])  # gone when update returns
    assert list(supervisor.states()) == ["c"] and process_alive(pids["c"])
    supervisor.stop()
    assert not process_alive(pids["c"])
