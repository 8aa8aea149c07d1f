"""Camera health: a silent camera goes offline by the background sweep (its open events end,
camera_offline starts), its first frame after raises camera_online; never-seen cameras stay
quiet; GET /cameras and the age metric."""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from fastapi.testclient import TestClient

from app.config import Settings
from app.core.metrics import Metrics
from app.rules.site.loader import SiteConfigError
from app.rules.service.facade import RulesService
from app.wiring import build_rules
from tests.support.rules_util import EXAMPLE_SITE, H, W, at, people
from tests.support.rules_api_app import make_app
from tests.support.webhooks import sample
from tests.support.wait import wait_for


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def make_service(tmp_path, metrics: Metrics | None = None, **site_changes) -> RulesService:
    data = yaml.safe_load(EXAMPLE_SITE.read_text())
    data.update(site_changes)
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(data))
    return build_rules(Settings(site_config=path, events_db_url=f"sqlite:///{tmp_path}/e.db",
                                               snapshot_dir=tmp_path / "snaps"), metrics or Metrics())


def crowd(svc, start: float, seconds: int) -> list[dict]:
    frame = np.zeros((H, W, 3), np.uint8)
    return [e for t in range(seconds) for e in svc.evaluate("plaza-cam", at(start + t), (W, H), people(3), frame)]


def test_silent_camera_goes_offline_and_comes_back(tmp_path):
    metrics = Metrics()
    svc = make_service(tmp_path, metrics)  # site default: 60 s
    clock = svc.health.monitor.clock = Clock()
    try:
        started = crowd(svc, 0, 11)
        assert [e["state"] for e in started] == ["started"]
        client = TestClient(make_app(svc))
        cams = {c["id"]: c for c in client.get("/cameras").json()}
        assert cams["plaza-cam"]["status"] == "online" and cams["gate-cam"]["status"] == "never_seen"
        assert [e["id"] for e in cams["plaza-cam"]["open_events"]] == [started[0]["id"]]
        assert cams["plaza-cam"]["last_frame_at"] == "2026-03-02T12:00:10Z" and cams["plaza-cam"]["offline_after_s"] == 60
        for cam_id, cam in cams.items():  # one camera alone: the same document
            assert client.get(f"/cameras/{cam_id}").json() == cam
        unknown = client.get("/cameras/no-such-cam")
        assert unknown.status_code == 404 and unknown.json()["error"] == "unknown_camera"
        assert client.get("/cameras/" + "x" * 5000).json()["error"] == "unknown_camera"  # message shortened
        assert len(client.get("/cameras/" + "x" * 5000).json()["message"]) < 300

        clock.t += 59
        svc.health.check_offline()
        assert svc.health.monitor.status("plaza-cam") == "online"
        assert sample(metrics, "campusguard_camera_last_frame_age_seconds", camera_id="plaza-cam") == 59
        clock.t += 2
        svc.health.check_offline()
        assert svc.health.monitor.status("plaza-cam") == "offline" and svc.health.monitor.status("gate-cam") == "never_seen"
        crowd_event = svc.get_event(started[0]["id"])
        assert crowd_event["state"] == "ended" and crowd_event["ended_at"] == "2026-03-02T12:00:10Z"  # its last frame
        offline = svc.query_events(rule="camera_offline").items
        assert len(offline) == 1 and offline[0]["state"] == "started" and offline[0]["camera_id"] == "plaza-cam"
        cams = {c["id"]: c for c in client.get("/cameras").json()}
        assert cams["plaza-cam"]["status"] == "offline" and cams["plaza-cam"]["open_events"] == []
        svc.health.check_offline()  # once offline, nothing more is raised
        assert svc.query_events(rule="camera_offline").total == 1

        clock.t += 100
        back = crowd(svc, 300, 1)
        assert [(e["rule"], e["state"]) for e in back] == [("camera_offline", "ended"), ("camera_online", "ended")]
        assert back[0]["id"] == offline[0]["id"] and back[0]["ended_at"] == back[1]["started_at"] == "2026-03-02T12:05:00Z"
        assert svc.get_event(offline[0]["id"])["state"] == "ended"
        assert svc.health.monitor.status("plaza-cam") == "online"
        # the rule state started afresh: the crowd needs its 10 s again
        assert crowd(svc, 301, 9) == [] and [e["state"] for e in crowd(svc, 310, 1)] == ["started"]
    finally:
        svc.stop()


def test_background_sweep_and_per_camera_threshold(tmp_path):
    data = yaml.safe_load(EXAMPLE_SITE.read_text())
    plaza = next(c for c in data["cameras"] if c["id"] == "plaza-cam")
    plaza["offline_after_s"] = 0.3
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(data))
    svc = build_rules(Settings(site_config=path, events_db_url=f"sqlite:///{tmp_path}/e.db",
                                              snapshot_dir=tmp_path / "snaps"), Metrics())
    assert svc.health.sweeper.interval_s == pytest.approx(0.2)
    svc.start()
    try:
        svc.evaluate("plaza-cam", at(0), (W, H), [])
        svc.evaluate("gate-cam", at(0), (W, H), [])  # site default 60 s: stays online
        assert wait_for(lambda: svc.health.monitor.status("plaza-cam") == "offline", timeout=5)  # no frame needed
        assert svc.health.monitor.status("gate-cam") == "online"
        assert wait_for(lambda: svc.query_events(rule="camera_offline").total == 1, timeout=5)
    finally:
        svc.stop()


def test_offline_after_must_be_positive(tmp_path):
    with pytest.raises(SiteConfigError, match="offline_after_s"):
        make_service(tmp_path, offline_after_s=0)
