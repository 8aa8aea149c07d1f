"""Camera ingest end to end (issue #24): real RTSP streams, the real model, a real server.

One `campusguard serve` for the module (imgsz 320, no warm-up) with rules and the embedded
ingest on, a GStreamer RTSP server with basic auth serving a clip of a person crossing the
frame, and one `campusguard gateway` process:

- ``embedded-cam`` is pulled by the server itself (credentials as ``${VAR}`` from the secrets
  directory); its crossing event comes from the embedded reader;
- ``gateway-cam`` is POSTed by the gateway (with a ``camera`` key), which also reports its
  stream's state; the server's site file gives it no source, so only the gateway pulls it;
- ``spare-cam`` is removed by a site reload: its ffmpeg is gone when the reload answers.

Both cameras stream from the start, so the two crossings are awaited once, side by side.
"""

from __future__ import annotations

import datetime as dt
import os
import signal
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import yaml

from tests.conftest import start_server
from tests.support.streams import RtspServer, children_named, process_alive
from tests.support.wait import wait_for

pytestmark = [pytest.mark.streams, pytest.mark.server]
REPO = Path(__file__).resolve().parents[2]
KEYS = {"admin": "admin-key-e2e-0123456789", "camera": "camera-key-e2e-0123456789"}
USER, PASSWORD = "guard", "s3cr:t@pw"
LINE = {"type": "line_crossing", "name": "doorway", "line": [[0.5, 0.02], [0.5, 0.98]], "cooldown_s": 2}
ZONE = {"name": "view", "polygon": [[0, 0], [1, 0], [1, 1], [0, 1]], "rules": [LINE]}


def site_doc(cameras: list[dict]) -> dict:
    # a link between boxes 10 % overlapping is kept (the default wants 20 %): the busy test CPU
    # may detect only every second or third sampled frame while the person walks on
    return {"version": 1, "tracker": {"match_thresh": 0.9}, "cameras": cameras}


def write(path: Path, doc: dict) -> Path:
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def rtsp(slow_walk_clip):
    with RtspServer(slow_walk_clip.path, user=USER, password=PASSWORD) as server:
        yield server


@pytest.fixture(scope="module")
def world(tmp_path_factory, weights, rtsp, slow_walk_clip):
    tmp = tmp_path_factory.mktemp("ingest-e2e")
    secrets = tmp / "secrets"
    secrets.mkdir()
    (secrets / "CAM_USER").write_text(USER + "\n")
    (secrets / "CAM_PASSWORD").write_text(PASSWORD + "\n")
    url = f"rtsp://${{CAM_USER}}:${{CAM_PASSWORD}}@127.0.0.1:{rtsp.port}/cam"
    cameras = [{"id": "embedded-cam", "source": {"url": url, "fps": 1}, "zones": [ZONE]},
               {"id": "gateway-cam", "zones": [ZONE]},
               {"id": "spare-cam", "source": {"url": f"file://{slow_walk_clip.path}", "fps": 0.2}}]
    site = write(tmp / "site.yaml", site_doc(cameras))
    server = start_server(tmp, weights, site_config=site, secrets_dir=secrets, site_watch_s=0,
                          events_db_url=f"sqlite:///{tmp}/events.db", snapshot_dir=tmp / "snaps", clips="false",
                          api_keys=f"admin:{KEYS['admin']},camera:{KEYS['camera']}")
    gw_site = write(tmp / "gateway-site.yaml", site_doc([{"id": "gateway-cam", "source": {"url": url, "fps": 1},
                                                          "zones": [ZONE]}]))
    (tmp / "camera.key").write_text(KEYS["camera"] + "\n")
    log = (tmp / "gateway.log").open("wb")
    env = {**{k: v for k, v in os.environ.items() if not k.startswith("CAMPUSGUARD_")}, "PYTHONUNBUFFERED": "1"}
    gateway = subprocess.Popen([sys.executable, "-m", "app.cli", "gateway", "--site", str(gw_site), "--service",
                                server.url, "--api-key-file", str(tmp / "camera.key"), "--secrets-dir", str(secrets),
                                "--report-every-s", "1", "--gateway-id", "gw-e2e"],
                               cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    client = httpx.Client(base_url=server.url, headers={"x-api-key": KEYS["admin"]}, timeout=60)
    yield {"server": server, "gateway": gateway, "client": client, "site": site, "cameras": cameras, "rtsp": rtsp,
           "gateway_log": tmp / "gateway.log"}
    client.close()
    if gateway.poll() is None:
        gateway.terminate()
        gateway.wait(30)
    server.stop()


def crossings(client: httpx.Client, camera: str) -> list[dict]:
    return client.get("/events", params={"camera_id": camera, "rule": "doorway"}).json()["items"]


@pytest.fixture(scope="module")
def crossed(world):
    """Both cameras' first crossing (awaited together: they stream side by side)."""
    client = world["client"]
    found: dict[str, list[dict]] = {}

    def both() -> bool:
        for camera in ("embedded-cam", "gateway-cam"):
            found[camera] = found.get(camera) or crossings(client, camera)
        return all(found.values())

    assert wait_for(both, 240, step=1.0), (client.get("/cameras").json(), world["server"].log()[-3000:],
                                          world["gateway_log"].read_text()[-3000:])
    return found


def check_crossing(event: dict) -> None:
    assert event["rule_type"] == "line_crossing" and event["objects"][0]["class_name"] == "person"
    assert event["objects"][0]["direction"] in ("in", "out")
    started = dt.datetime.fromisoformat(event["started_at"].replace("Z", "+00:00"))
    # the capture time is the wall clock when the frame was read, as if posted with ?timestamp=
    assert abs((dt.datetime.now(dt.timezone.utc) - started).total_seconds()) < 300


def test_embedded_reader_gives_the_crossing_event(world, crossed):
    check_crossing(crossed["embedded-cam"][0])
    camera = world["client"].get("/cameras/embedded-cam").json()
    source = camera["source"]
    assert source["state"] == "streaming" and source["reported_by"] is None and source["frames_sent"] >= 3
    assert source["source"] == f"rtsp://***@127.0.0.1:{world['rtsp'].port}/cam"  # no user, no password
    assert PASSWORD not in str(camera) and USER not in source["source"]
    assert PASSWORD not in world["server"].log() and "s3cr" not in world["server"].log()


def test_gateway_gives_the_crossing_event_and_reports_the_stream(world, crossed):
    check_crossing(crossed["gateway-cam"][0])
    client = world["client"]
    source = client.get("/cameras/gateway-cam").json()["source"]
    assert source["reported_by"] == "gw-e2e" and source["state"] == "streaming" and source["frames_sent"] >= 3
    listed = {c["id"]: c["source"] for c in client.get("/cameras").json()}
    assert listed["gateway-cam"]["reported_by"] == "gw-e2e" and listed["embedded-cam"]["reported_by"] is None
    metrics = client.get("/metrics").text
    assert 'campusguard_source_state{camera_id="gateway-cam",state="streaming"} 1.0' in metrics
    assert 'campusguard_source_state{camera_id="embedded-cam",state="streaming"} 1.0' in metrics
    assert KEYS["camera"] not in world["gateway_log"].read_text()


def test_site_reload_removes_a_camera_and_its_ffmpeg(world, crossed):
    server, client = world["server"], world["client"]
    spare = [pid for pid in children_named(server.proc.pid, "ffmpeg")
             if "slow-walk.mp4" in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")]
    assert len(spare) == 1, children_named(server.proc.pid, "ffmpeg")
    write(world["site"], site_doc([c for c in world["cameras"] if c["id"] != "spare-cam"]))
    reply = client.post("/admin/reload")
    assert reply.status_code == 200, reply.text
    assert not process_alive(spare[0])  # gone when the reload answers
    listed = {c["id"] for c in client.get("/cameras").json()}
    assert listed == {"embedded-cam", "gateway-cam"}
    assert len(children_named(server.proc.pid, "ffmpeg")) == 1  # embedded-cam's reader goes on


@pytest.mark.parametrize("source, field, words", [
    ({"url": "ftp://10.0.0.5/cam"}, "cameras[0].source.url", "unsupported scheme 'ftp'"),
    ({"url": "rtsp://10.0.0.5/cam", "fps": 0}, "cameras[0].source.fps", "greater than 0"),
    ({"url": "rtsp://10.0.0.5/cam", "fps": 31}, "cameras[0].source.fps", "less than or equal to 30"),
    ({"url": "rtsp://admin:${NOT_SET_ANYWHERE}@10.0.0.5/cam"}, "cameras[0].source.url", "${NOT_SET_ANYWHERE}"),
])
def test_reload_with_a_bad_source_is_refused_with_the_field_named(world, crossed, source, field, words):
    client = world["client"]
    before = client.get("/site").json()["version"]
    bad = [{**world["cameras"][0], "source": source}, world["cameras"][1]]
    write(world["site"], site_doc(bad))
    try:
        reply = client.post("/admin/reload")
        assert reply.status_code == 422, reply.text
        body = reply.json()
        assert body["error"] == "invalid_site_config"
        assert any(d.startswith(f"{field}: ") and words in d for d in body["detail"]), body["detail"]
        assert client.get("/site").json()["version"] == before  # the running config stays
        assert client.get("/cameras/embedded-cam").json()["source"]["state"] == "streaming"
    finally:
        write(world["site"], site_doc(world["cameras"][:2]))


def test_sigterm_leaves_no_ffmpeg_behind(world, crossed):
    """SIGTERM to `campusguard serve` (embedded ingest) and to `campusguard gateway`: each exits 0
    and every ffmpeg child it started is gone (last in the module: it ends the world)."""
    for proc in (world["server"].proc, world["gateway"]):
        pids = children_named(proc.pid, "ffmpeg")
        assert pids, f"no ffmpeg under {proc.pid}"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(60) == 0
        assert not [pid for pid in pids if process_alive(pid)]
