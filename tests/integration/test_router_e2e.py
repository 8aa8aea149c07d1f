"""Line crossings counted right while a camera's frames arrive through the Kubernetes router (#26).

Two real `campusguard serve` replicas (imgsz 320, each its own SQLite event store, so a frame
that reached the wrong replica would show there) stand for two detector pods: loopback
addresses 127.0.0.2 and 127.0.0.3 on one port, as pods share 8000. In front of them the
router exactly as deploy/k8s/base/router-configmap.yaml ships it (nginx.conf and the
endpoints.sh loop that writes its upstream list; tests/deploy/router_util.py). Four cameras,
two owned by each replica, walk a person down across a counting line and back up
(tests/integration/test_rules_loitering_crossing_e2e.py's frames), their frames interleaved: each camera counts
exactly one crossing in and one out, all on its own replica, and the other replica never saw it.
"""

from __future__ import annotations

import dataclasses
import datetime as dt

import cv2
import httpx
import numpy as np
import pytest
import yaml

from tests.deploy.router_util import running_router
from tests.support.loitering_frames import SIZE, frames
from tests.support.net import free_port

pytestmark = pytest.mark.server

PODS = ["127.0.0.2", "127.0.0.3"]
CANDIDATES = [f"door-{i}" for i in range(16)]
LINE_RULE = {"type": "line_crossing", "name": "doorway", "line": [[0.0, 0.6], [1.0, 0.6]], "cooldown_s": 1,
             "max_ratio": 1.0}
SITE = {"cameras": [{"id": cam, "zones": [{"name": "hall", "polygon": [[0, 0], [1, 0], [1, 1], [0, 1]],
                                           "rules": [LINE_RULE]}]} for cam in CANDIDATES]}


def jpeg(frame: np.ndarray) -> bytes:
    ok, data = cv2.imencode(".jpg", frame)
    assert ok
    return data.tobytes()


def test_crossings_counted_right_through_the_router(server_factory, tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(yaml.safe_dump(SITE))
    port = free_port()
    replicas = []
    for i, host in enumerate(PODS):
        server = server_factory(wait=False, host=host, port=port, site_config=site, snapshot_dir=tmp_path / f"snaps-{i}",
                                events_db_url=f"sqlite:///{tmp_path}/events-{i}.db")
        replicas.append(dataclasses.replace(server, url=f"http://{host}:{port}"))
    for server in replicas:
        server.wait_ready()
    t0 = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) - dt.timedelta(minutes=5)
    empty = jpeg(np.full((SIZE, SIZE, 3), 128, np.uint8))

    def post(client, cam: str, data: bytes, sec: float):
        r = client.post("/detect", files={"image": ("f.jpg", data, "image/jpeg")},
                        params={"camera_id": cam, "timestamp": (t0 + dt.timedelta(seconds=sec)).isoformat()})
        assert r.status_code == 200, r.text
        return r.json()

    with running_router(tmp_path / "router", PODS, port) as router, httpx.Client(base_url=router.url, timeout=60) as client:
        # which replica owns which camera: one empty frame through the router, then ask each replica
        owned: dict[int, list[str]] = {0: [], 1: []}
        for cam in CANDIDATES:
            post(client, cam, empty, -10)
            seen = [i for i, s in enumerate(replicas) if status(s, cam) != "never_seen"]
            assert len(seen) == 1, (cam, seen)
            if len(owned[seen[0]]) < 2:
                owned[seen[0]].append(cam)
            if all(len(cams) == 2 for cams in owned.values()):
                break
        assert all(len(cams) == 2 for cams in owned.values()), f"16 cameras on one replica: {owned}"
        cameras = owned[0] + owned[1]

        events: dict[str, list[tuple[int, str, str]]] = {cam: [] for cam in cameras}
        for sec, data in frames():
            for cam in cameras:  # interleaved, as a gateway sends them
                body = post(client, cam, data, sec)
                assert [d["class_name"] for d in body["detections"]].count("person") == 1, (cam, sec)
                events[cam] += [(sec, e["state"], e["objects"][0].get("direction", "")) for e in body["events"]
                                if e["rule"] == "doorway"]
        for cam in cameras:
            # down across the line between 6 s and 8 s, back up between 22 s and 24 s: one track, unbroken
            assert events[cam] == [(8, "started", "in"), (8, "ended", "in"), (24, "started", "out"),
                                   (24, "ended", "out")], (cam, events[cam])
            counts = client.get(f"/cameras/{cam}/counts", params={"since": t0.isoformat()}).json()["counts"]
            assert counts == [{"line": "hall/doorway", "direction": "in", "class_name": "person", "count": 1},
                              {"line": "hall/doorway", "direction": "out", "class_name": "person", "count": 1}], cam
    for owner, cams in owned.items():
        other = replicas[1 - owner]
        with replicas[owner].client() as mine, other.client() as theirs:
            for cam in cams:
                assert mine.get("/events", params={"camera_id": cam}).json()["total"] == 2, cam
                assert theirs.get("/events", params={"camera_id": cam}).json()["total"] == 0, cam
                assert status(other, cam) == "never_seen", cam


def status(server, cam: str) -> str:
    with server.client() as c:
        r = c.get(f"/cameras/{cam}")
        assert r.status_code == 200, r.text
        return r.json()["status"]
