"""Campus rules end to end: the real server, the real model, real COCO frames, a local webhook receiver.

The crowd camera of deploy/site.example.yaml (``plaza-cam``: >= 3 persons in the plaza for
10 s, ends 2 s after the crowd is gone) is fed one COCO image with many people, repeatedly,
with capture timestamps 2 s apart, then an image without people. Capture timestamps make
the rule's seconds virtual, so the test takes as long as the inferences, not 16 s.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import hmac
import json
import signal
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml

from tests.support.rules_util import Receiver
from tests.support.net import free_port
from tests.support.wait import wait_for
from tests.support.rules_e2e import CAMERA, SECRET, detect, drive_crowd, metric, pick_frames, site_copy


def check_clip(client, started: dict, src: np.ndarray, tmp_path: Path) -> None:
    """The evidence clip (default 5 s before to 5 s after the start at +10 s): written by the
    clip thread once the frame at +15 s arrived; the kept frames are +6, 8, 10, 12, 14, 15 s,
    H.264, downscaled to at most 640 px wide, each at its capture time."""
    import av

    assert started["clip"] == f"/events/{started['id']}/clip.mp4"
    assert wait_for(lambda: client.get(started["clip"]).status_code == 200, timeout=20)
    got = client.get(started["clip"])
    assert got.headers["content-type"] == "video/mp4"
    (tmp_path / "clip.mp4").write_bytes(got.content)
    h, w = src.shape[:2]
    scale = min(1.0, 640 / w)
    with av.open(str(tmp_path / "clip.mp4")) as container:
        stream = container.streams.video[0]
        times = [round(float(f.pts * f.time_base), 3) for f in container.decode(stream)]
        assert (stream.codec_context.name, stream.width, stream.height) == (
            "h264", int(w * scale) // 2 * 2, int(h * scale) // 2 * 2)
    # the +15 s frame ends the clip; on a machine so loaded that it arrives more than post_s +
    # QUIET_GRACE_S (10 s) of wall time after the start, the clip is written without it
    assert times in ([0.0, 2.0, 4.0, 6.0, 8.0, 9.0], [0.0, 2.0, 4.0, 6.0, 8.0]), times


def test_crowd_event_in_reply_store_metrics_and_webhook(server_factory, tmp_path, dataset):
    rx = Receiver()
    try:
        server = server_factory(site_config=site_copy(tmp_path), events_db_url=f"sqlite:///{tmp_path}/events.db",
                                snapshot_dir=tmp_path / "snaps", webhook_urls=rx.url, webhook_secret=SECRET,
                                webhook_max_backoff_s=1, imgsz=320)
        t0 = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) - dt.timedelta(minutes=5)
        with server.client() as c:
            crowd, empty = pick_frames(c, dataset)
            seen = drive_crowd(c, crowd, empty, t0)
            # one event: started on the frame 10 s into the crowd, ended 2 s after the first empty frame
            assert [(sec, e["state"]) for sec, e in seen] == [(10, "started"), (16, "ended")], seen
            started, ended = seen[0][1], seen[1][1]
            assert started["id"] == ended["id"]
            assert (started["camera_id"], started["zone"], started["rule"]) == (CAMERA, "plaza", "crowd")
            assert dt.datetime.fromisoformat(started["started_at"].replace("Z", "+00:00")) == t0 + dt.timedelta(seconds=10)
            assert dt.datetime.fromisoformat(ended["ended_at"].replace("Z", "+00:00")) == t0 + dt.timedelta(seconds=14)
            assert ended["max_count"] >= 3 and len(ended["objects"]) == ended["max_count"]

            listed = c.get("/events", params={"camera_id": CAMERA, "rule": "crowd"}).json()
            assert listed["total"] == 1 and listed["items"][0]["id"] == started["id"]
            assert listed["items"][0]["state"] == "ended"
            one = c.get(f"/events/{started['id']}")
            assert one.status_code == 200 and one.json()["ended_at"] == ended["ended_at"]
            assert c.get("/events/nope").status_code == 404
            snap = c.get(started["snapshot"])
            assert snap.status_code == 200 and snap.headers["content-type"] == "image/jpeg"
            src = cv2.imdecode(np.frombuffer(crowd, np.uint8), cv2.IMREAD_COLOR)
            assert cv2.imdecode(np.frombuffer(snap.content, np.uint8), cv2.IMREAD_COLOR).shape == src.shape
            check_clip(c, started, src, tmp_path)

            assert wait_for(lambda: len(rx.requests) >= 2)
            text = c.get("/metrics").text
        assert metric(text, "campusguard_events_total", camera_id=CAMERA, zone="plaza", rule="crowd") == 1
        assert metric(text, "campusguard_zone_objects", camera_id=CAMERA, zone="plaza") == 0
        assert (metric(text, "campusguard_rule_evaluation_seconds_count") or 0) >= 11

        time.sleep(1.0)  # nothing more arrives
        assert rx.keys() == [f"{started['id']}:started", f"{started['id']}:ended"]
        for req in rx.requests:
            expected = "sha256=" + hmac.new(SECRET.encode(), req["body"], hashlib.sha256).hexdigest()
            assert hmac.compare_digest(req["headers"]["x-campusguard-signature"], expected)
        delivered = [json.loads(r["body"]) for r in rx.requests]
        assert [d["event"]["state"] for d in delivered] == ["started", "ended"]
        assert delivered[1]["event"]["ended_at"] == ended["ended_at"]
        with server.client() as c:
            text = c.get("/metrics").text
        assert metric(text, "campusguard_webhook_deliveries_total", outcome="delivered") == 2
        assert metric(text, "campusguard_webhook_outbox_depth") == 0
    finally:
        rx.close()


def test_webhook_outage_annotate_and_reload(server_factory, tmp_path, dataset):
    port = free_port()
    url = f"http://127.0.0.1:{port}/hook"  # the receiver is down at first
    site = site_copy(tmp_path)
    server = server_factory(site_config=site, events_db_url=f"sqlite:///{tmp_path}/events.db",
                            snapshot_dir=tmp_path / "snaps", webhook_urls=url, webhook_secret=SECRET,
                            webhook_max_backoff_s=1, imgsz=320)
    t0 = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) - dt.timedelta(minutes=5)
    rx = None
    try:
        with server.client() as c:
            crowd, empty = pick_frames(c, dataset)
            seen = drive_crowd(c, crowd, empty, t0)
            assert [e["state"] for _, e in seen] == ["started", "ended"]
            event_id = seen[0][1]["id"]
            assert wait_for(lambda: (metric(c.get("/metrics").text, "campusguard_webhook_deliveries_total",
                                            outcome="network_error") or 0) >= 2)
            assert metric(c.get("/metrics").text, "campusguard_webhook_outbox_depth") == 2

            rx = Receiver(port=port)  # back up: the outbox delivers what it kept
            assert wait_for(lambda: len(rx.requests) >= 2)
            time.sleep(2.5)  # longer than the capped backoff: a duplicate would have arrived by now
            assert rx.keys() == [f"{event_id}:started", f"{event_id}:ended"]
            assert wait_for(lambda: metric(c.get("/metrics").text, "campusguard_webhook_outbox_depth") == 0)

            # annotate=true and Accept: image/jpeg return the frame, annotated, at its size
            src = cv2.imdecode(np.frombuffer(crowd, np.uint8), cv2.IMREAD_COLOR)
            ts = (t0 + dt.timedelta(seconds=100)).isoformat()
            for r in (detect(c, crowd, None, annotate="true", timestamp=ts),
                      c.post("/detect", files={"image": ("f.jpg", crowd, "image/jpeg")},
                             params={"camera_id": CAMERA, "timestamp": ts}, headers={"Accept": "image/jpeg"})):
                assert r.status_code == 200 and r.headers["content-type"] == "image/jpeg"
                img = cv2.imdecode(np.frombuffer(r.content, np.uint8), cv2.IMREAD_COLOR)
                assert img is not None and img.shape == src.shape
                assert not np.array_equal(img, src)

            # a malformed file on reload: 422 with every error; the old config keeps running
            good = site.read_text()
            bad = yaml.safe_load(good)
            bad["cameras"][1]["zones"][0]["polygon"] = [[0, 0], [3, 3]]
            bad["cameras"][1]["zones"][0]["rules"][0]["min_count"] = 0
            bad["cameras"][2]["id"] = "gate-cam"
            site.write_text(yaml.safe_dump(bad))
            r = c.post("/admin/reload")
            assert r.status_code == 422, r.text
            detail = r.json()["detail"]
            assert len(detail) == 3 and any("duplicate camera id" in d for d in detail)
            assert any("min_count" in d for d in detail) and any("polygon" in d for d in detail)
            server.proc.send_signal(signal.SIGHUP)  # the same file via SIGHUP: refused, logged, still serving
            assert wait_for(lambda: "reload refused" in server.log(), timeout=10)
            assert server.proc.poll() is None
            t1 = t0 + dt.timedelta(minutes=3)  # past the 60 s cool-down
            again = [e for sec in range(0, 12, 2)
                     for e in detect(c, crowd, t1 + dt.timedelta(seconds=sec)).json()["events"]]
            assert [e["state"] for e in again] == ["started"]  # the old plaza rule still applies

            site.write_text(good)
            r = c.post("/admin/reload")
            assert r.status_code == 200 and r.json()["cameras"] == ["gate-cam", "plaza-cam", "lot-cam", "door-cam", "entrance-cam"]

            # a wrong gateway clock: 422 before inference, and the camera's next frame is evaluated
            r = c.post("/detect", files={"image": ("f.jpg", crowd, "image/jpeg")},
                       params={"camera_id": CAMERA, "timestamp": "9999-12-31T23:59:59Z"})
            assert r.status_code == 422 and r.json()["error"] == "invalid_timestamp", r.text
            assert detect(c, crowd, t1 + dt.timedelta(seconds=12)).json()["events"] == []  # same crowd goes on
            assert metric(c.get("/metrics").text, "campusguard_invalid_timestamps_total",
                          camera_id=CAMERA, reason="future") == 1
            # and its state can be reset without a restart: the open crowd event ends
            r = c.post(f"/admin/cameras/{CAMERA}/reset")
            assert r.status_code == 200 and r.json()["ended_events"] == 1, r.text
    finally:
        if rx:
            rx.close()


def test_malformed_site_file_refused_at_startup(server_factory, tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump({"timezone": "Atlantis/Capital", "cameras": [
        {"id": "cam-1", "zones": [{"name": "z", "polygon": [[0, 0], [1, 1]],
                                   "rules": [{"type": "crowd"}, {"type": "fire_lane"}]}]},
        {"id": "cam-1", "zones": [{"name": "ok", "polygon": [[0, 0], [1, 0], [1, 1]],
                                   "rules": [{"type": "intrusion", "min_confidence": 7}]}]}]}))
    server = server_factory(wait=False, site_config=path, events_db_url=f"sqlite:///{tmp_path}/events.db")
    try:
        server.proc.wait(timeout=120)
    except Exception:
        pytest.fail(f"the server kept running with a malformed site file:\n{server.log()[-3000:]}")
    assert server.proc.returncode != 0
    log = server.log()
    for fragment in ("Atlantis/Capital", "cameras[0].zones[0].polygon", "cameras[0].zones[0].rules[0].min_count",
                     "cameras[0].zones[0].rules[1].min_duration_s", "cameras[1].id: duplicate camera id",
                     "cameras[1].zones[0].rules[0].min_confidence", "6 error(s)"):
        assert fragment in log, f"{fragment!r} not in the startup log:\n{log[-3000:]}"
