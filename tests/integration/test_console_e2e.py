"""The console's JSON routes on a real `campusguard serve` with the real model (imgsz 320): a zone
saved through PUT is used by the very next posted frame; roles are enforced; the frame and status
routes show what was sent. One server start."""

from __future__ import annotations

import shutil
import time

import cv2
import httpx
import numpy as np
import yaml

from tests.support.rules_util import EXAMPLE_SITE

ADMIN, VIEWER, CAMERA = "admin-key-e2e", "viewer-key-e2e", "camera-key-e2e"
ZONE = {"name": "console-zone", "kind": "restricted", "polygon": [[0.0, 0.3], [1.0, 0.3], [1.0, 1.0], [0.0, 1.0]],
        "rules": [{"type": "intrusion", "classes": ["person"], "min_confidence": 0.3}]}


def test_zone_saved_through_put_is_used_by_the_next_frame(server_factory, bus_jpg, tmp_path):
    site = tmp_path / "site.yaml"
    shutil.copy(EXAMPLE_SITE, site)
    server = server_factory(imgsz=320, site_config=site, events_db_url=f"sqlite:///{tmp_path}/events.db",
                            snapshot_dir=tmp_path / "snaps", clips="false",
                            api_keys=f"{ADMIN},viewer:{VIEWER},camera:{CAMERA}")
    with httpx.Client(base_url=server.url, timeout=60) as c:
        def detect(key: str) -> httpx.Response:
            return c.post("/detect", params={"camera_id": "gate-cam"}, content=bus_jpg,
                          headers={"content-type": "image/jpeg", "x-api-key": key})

        before = detect(CAMERA)
        assert before.status_code == 200 and not [e for e in before.json()["events"] if e["zone"] == "console-zone"]
        assert detect(VIEWER).json()["error"] == "insufficient_role"

        doc = c.get("/site", headers={"x-api-key": VIEWER}).json()
        url = "/admin/site/cameras/gate-cam/zones/console-zone"
        denied = c.put(url, json=ZONE, headers={"x-api-key": VIEWER})
        assert denied.status_code == 403 and denied.json()["error"] == "insufficient_role"
        bad = c.put(url, json={**ZONE, "polygon": [[0, 0], [1, 1]]}, headers={"x-api-key": ADMIN})
        assert bad.status_code == 422 and bad.json()["detail"][0]["field"] == "polygon"
        saved = c.put(url, json=ZONE, headers={"x-api-key": ADMIN, "If-Match": doc["version"]})
        assert saved.status_code == 200, saved.text

        after = detect(CAMERA)
        started = [e for e in after.json()["events"] if e["zone"] == "console-zone"]
        assert [(e["rule"], e["state"]) for e in started] == [("intrusion", "started")], after.json()["events"]
        assert started[0]["objects"] and all(o["class_name"] == "person" for o in started[0]["objects"])

        frame = c.get("/cameras/gate-cam/frame.jpg", headers={"x-api-key": VIEWER})
        img = cv2.imdecode(np.frombuffer(frame.content, np.uint8), cv2.IMREAD_COLOR)
        assert frame.status_code == 200 and img.shape[:2] == (1080, 810)
        status = c.get("/status", headers={"x-api-key": VIEWER}).json()
        assert sum(b["requests"] for b in status["recent"]) == 3 and status["health"]["ready"] is True
        me = c.get("/auth/me", headers={"x-api-key": CAMERA}).json()
        assert me["role"] == "camera" and me["permissions"] == ["detect"]
    on_disk = yaml.safe_load(site.read_text())
    assert [z["name"] for z in on_disk["cameras"][0]["zones"]] == ["sports-ground", "console-zone"]
    assert (tmp_path / "site.yaml.bak").read_bytes() == EXAMPLE_SITE.read_bytes()


def test_zone_saved_on_one_replica_is_used_by_the_other(server_factory, bus_jpg, tmp_path):
    """Two replicas read one site file (a shared volume); a zone saved through one of them
    reaches the other by its file watch (SITE_WATCH_S), without a reload request: the camera's
    next frame on the other replica is evaluated with it. A hand edit that breaks the file is
    refused there too: the running zones stay, and GET /site says why."""
    site = tmp_path / "site.yaml"
    shutil.copy(EXAMPLE_SITE, site)
    a, b = (server_factory(wait=False, imgsz=320, site_config=site, site_watch_s=0.3, clips="false",
                           events_db_url=f"sqlite:///{tmp_path}/events-{n}.db", snapshot_dir=tmp_path / f"snaps-{n}")
            for n in ("a", "b"))
    for server in (a, b):
        server.wait_ready()
    zone = {**ZONE, "polygon": [[0, 0], [1, 0], [1, 1], [0, 1]]}
    with httpx.Client(base_url=a.url, timeout=60) as ca, httpx.Client(base_url=b.url, timeout=60) as cb:
        saved = ca.put("/admin/site/cameras/plaza-cam/zones/console-zone", json=zone)
        assert saved.status_code == 200, saved.text
        deadline = time.monotonic() + 15
        while cb.get("/site").json()["version"] != saved.json()["version"]:
            assert time.monotonic() < deadline, "replica b did not load the file replica a wrote"
            time.sleep(0.1)
        events = cb.post("/detect", params={"camera_id": "plaza-cam"}, content=bus_jpg,
                         headers={"content-type": "image/jpeg"}).json()["events"]
        assert [(e["zone"], e["state"]) for e in events if e["zone"] == "console-zone"] == [("console-zone", "started")]

        site.write_text(site.read_text().replace("min_count: 3", "min_count: -3"))  # a bad hand edit
        deadline = time.monotonic() + 15
        while not (doc := cb.get("/site").json())["reload_error"]:
            assert time.monotonic() < deadline, "replica b did not notice the changed file"
            time.sleep(0.1)
        assert "min_count" in doc["reload_error"] and doc["file_version"] != doc["version"]
        assert doc["version"] == saved.json()["version"]  # still the running config
        metrics = cb.get("/metrics").text
        assert 'campusguard_site_reloads_total{outcome="refused",trigger="file_changed"} 1.0' in metrics
        assert 'campusguard_site_reloads_total{outcome="ok",trigger="file_changed"} 1.0' in metrics
        assert "campusguard_site_file_changed 1.0" in metrics  # alert CampusGuardSiteFileNotLoaded
