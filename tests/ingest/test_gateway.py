"""`campusguard gateway` as a real process against a real HTTP server: frames POSTed with
the key and capture time, states reported, shard honoured, SIGHUP reload, SIGTERM and
SIGKILL leave no ffmpeg behind, and a service answering 503 for a minute."""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from app.core.sharding import shard_of
from tests.support.recording_service import RecordingService
from tests.support.streams import children_named, process_alive
from tests.support.wait import wait_for

pytestmark = pytest.mark.streams
REPO = Path(__file__).resolve().parents[2]
KEY = "camera-key-0123456789"


def write_site(path: Path, cameras: dict[str, dict]) -> Path:
    path.write_text(yaml.safe_dump({"version": 1, "cameras": [{"id": cid, "source": src} for cid, src in
                                                                 cameras.items()]}))
    return path


@pytest.fixture
def service() -> Iterator[RecordingService]:
    svc = RecordingService().start()
    yield svc
    svc.stop()


@pytest.fixture
def gateway(tmp_path, stream_tools):
    """``gateway(site, service_url, *extra)``: a `campusguard gateway` process (killed at the end)."""
    procs: list[subprocess.Popen] = []
    key_file = tmp_path / "camera.key"
    key_file.write_text(KEY + "\n")

    def start(site: Path, url: str, *extra: str) -> subprocess.Popen:
        log = (tmp_path / f"gateway-{len(procs)}.log").open("wb")
        proc = subprocess.Popen([sys.executable, "-m", "app.cli", "gateway", "--site", str(site), "--service", url,
                                 "--api-key-file", str(key_file), "--report-every-s", "1", *extra],
                                cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        procs.append(proc)
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def log_of(tmp_path: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(tmp_path.glob("gateway-*.log")))


def test_gateway_posts_reports_reloads_and_stops_cleanly(tmp_path, walk_clip, service, gateway):
    clip = f"file://{walk_clip.path}"
    ids = [f"cam-{i}" for i in range(6)]
    mine = [cid for cid in ids if shard_of(cid, 2) == 1]
    assert 0 < len(mine) < len(ids)
    site = write_site(tmp_path / "site.yaml", {cid: {"url": clip, "fps": 2} for cid in ids})
    proc = gateway(site, service.url, "--shard", "1/2")
    assert wait_for(lambda: all(len(service.posts_for(c)) >= 2 for c in mine), 30), log_of(tmp_path)
    assert {p.camera_id for p in service.posts} == set(mine)
    post = service.posts_for(mine[0])[-1]
    assert post.api_key == KEY and post.content_type == "image/jpeg" and post.body[:2] == b"\xff\xd8"
    captured = dt.datetime.fromisoformat(post.timestamp)
    assert captured.tzinfo is not None and abs((dt.datetime.now(dt.timezone.utc) - captured).total_seconds()) < 10
    assert wait_for(lambda: all((r := service.last_report(c)) and r[1]["source"]["state"] == "streaming"
                                for c in mine), 10)
    method, body = service.last_report(mine[0])
    assert body["ttl_s"] == 3 and body["source"]["source"] == clip and body["source"]["frames_sent"] >= 1
    assert len(children_named(proc.pid, "ffmpeg")) == len(mine)

    removed, kept = mine[0], mine[1:]
    write_site(site, {cid: {"url": clip, "fps": 2} for cid in ids if cid != removed})
    pids_before = set(children_named(proc.pid, "ffmpeg"))
    proc.send_signal(signal.SIGHUP)
    assert wait_for(lambda: service.last_report(removed)[0] == "DELETE", 10), log_of(tmp_path)
    assert len(children_named(proc.pid, "ffmpeg")) == len(kept)

    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0
    assert not [pid for pid in pids_before if process_alive(pid)]  # no ffmpeg left behind
    assert all(service.last_report(c)[0] == "DELETE" for c in kept)
    assert KEY not in log_of(tmp_path)


def test_killed_gateway_takes_its_ffmpeg_along(tmp_path, walk_clip, service, gateway):
    site = write_site(tmp_path / "site.yaml", {"a": {"url": f"file://{walk_clip.path}"},
                                               "b": {"url": f"file://{walk_clip.path}"}})
    proc = gateway(site, service.url)
    assert wait_for(lambda: len(children_named(proc.pid, "ffmpeg")) == 2, 30), log_of(tmp_path)
    children = children_named(proc.pid, "ffmpeg")
    proc.send_signal(signal.SIGKILL)  # no cleanup code runs: PR_SET_PDEATHSIG does it
    proc.wait(10)
    assert wait_for(lambda: not any(process_alive(pid) for pid in children), 5)


@pytest.mark.parametrize("site_text, words", [
    ("cameras:\n  - id: gate-cam\n    source: {url: 'smb://nas/cam'}\n", ["cameras[0].source.url", "'smb'"]),
    ("cameras:\n  - id: gate-cam\n    source: {url: 'rtsp://x/cam', fps: 0}\n", ["cameras[0].source.fps"]),
    ("cameras:\n  - id: gate-cam\n    source: {url: 'rtsp://u:${GATE_PW}@x/cam'}\n",
     ["cameras[0].source.url", "${GATE_PW} is not defined"]),
])
def test_unusable_site_file_exits_2_with_the_field_named(tmp_path, site_text, words):
    site = tmp_path / "site.yaml"
    site.write_text(site_text)
    env = {k: v for k, v in os.environ.items() if k != "GATE_PW"}
    done = subprocess.run([sys.executable, "-m", "app.cli", "gateway", "--site", str(site), "--service",
                           "http://127.0.0.1:9"], cwd=REPO, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert all(w in done.stderr for w in words), done.stderr


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_service_answering_503_for_a_minute(tmp_path, walk_clip, service, gateway):
    """Frames dropped and counted, Retry-After honoured (no request pile-up), RSS flat."""
    service.busy = True
    cameras = ["busy-a", "busy-b"]
    site = write_site(tmp_path / "site.yaml", {c: {"url": f"file://{walk_clip.path}", "fps": 10} for c in cameras})
    proc = gateway(site, service.url)
    assert wait_for(lambda: all(service.posts_for(c) for c in cameras), 30), log_of(tmp_path)
    start = time.monotonic()
    rss: list[int] = []
    while time.monotonic() - start < 60:
        time.sleep(5)
        rss.append(rss_kib(proc.pid))
    assert proc.poll() is None
    for camera in cameras:
        posts = service.posts_for(camera)
        gaps = [b.received_at - a.received_at for a, b in zip(posts, posts[1:])]
        # one request per Retry-After (2 s) + answer delay, not one per frame (10 fps = 600 frames)
        assert len(posts) <= 60 / 2.3 + 3 and min(gaps) >= 2.0, (len(posts), min(gaps))
        assert service.open_max[camera] == 1
        source = service.last_report(camera)[1]["source"]
        assert source["frames_sent"] == 0 and source["state"] == "streaming"
        assert source["dropped"]["service_busy"] > 300  # every frame of the minute, counted
        assert source["frames_read"] >= source["dropped"]["service_busy"]
    assert max(rss[2:]) - rss[2] < 10 * 1024, rss  # from 15 s on: flat (a queue would grow ~1 MB/s)
