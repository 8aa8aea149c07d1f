"""Line crossings through the service: stored events, the metric and GET /cameras/{id}/counts."""

from __future__ import annotations

import numpy as np
import pytest
import yaml
from fastapi.testclient import TestClient

from app.config import Settings
from app.core.metrics import Metrics
from app.rules.service.facade import RulesService
from app.wiring import build_rules
from tests.support.rules_api_app import make_app
from tests.support.rules_util import H, W, at, det

SITE = {"cameras": [{"id": "lane", "zones": [{"name": "gate", "polygon": [[0, 0], [1, 0], [1, 1], [0, 1]], "rules": [
    {"type": "line_crossing", "name": "entry", "line": [[0.0, 0.5], [1.0, 0.5]], "classes": ["person", "car"]}]}]}]}


@pytest.fixture
def svc(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(SITE))
    metrics = Metrics()
    service = build_rules(Settings(site_config=path, events_db_url=f"sqlite:///{tmp_path}/e.db",
                                                  snapshot_dir=tmp_path / "snaps"), metrics)
    service.metrics_for_test = metrics
    frame = np.zeros((H, W, 3), np.uint8)
    steps = [0.3 + 0.05 * i for i in range(9)]
    for i, y in enumerate(steps):                      # one person in (down) at t=0..8
        service.evaluate("lane", at(i), (W, H), [det("person", 0.5, y)], frame)
    for i, y in enumerate(reversed(steps)):            # a car out (up) at t=100..108
        service.evaluate("lane", at(100 + i), (W, H), [det("car", 0.3, y, w=0.1, h=0.1)], frame)
    for i, y in enumerate(steps):                      # another person in at t=200..208
        service.evaluate("lane", at(200 + i), (W, H), [det("person", 0.7, y)], frame)
    yield service
    service.stop()


def test_counts_route_since_and_errors(svc):
    client = TestClient(make_app(svc))
    body = client.get("/cameras/lane/counts").json()
    assert body["camera_id"] == "lane" and body["complete_since"] is None
    assert body["counts"] == [{"line": "gate/entry", "direction": "in", "class_name": "person", "count": 2},
                              {"line": "gate/entry", "direction": "out", "class_name": "car", "count": 1}]
    later = client.get("/cameras/lane/counts", params={"since": "2026-03-02T12:01:00Z"}).json()
    assert [(c["direction"], c["class_name"], c["count"]) for c in later["counts"]] == [("in", "person", 1),
                                                                                       ("out", "car", 1)]
    r = client.get("/cameras/nope/counts")
    assert r.status_code == 404 and r.json()["error"] == "unknown_camera"
    assert client.get("/cameras/lane/counts", params={"since": "yesterday"}).status_code == 422


def test_crossings_are_stored_events_and_metrics(svc):
    client = TestClient(make_app(svc))
    items = client.get("/events", params={"camera_id": "lane"}).json()["items"]
    assert len(items) == 3
    assert all(e["rule_type"] == "line_crossing" and e["state"] == "ended" and e["ended_at"] == e["started_at"]
               for e in items)
    assert sorted(e["objects"][0]["direction"] for e in items) == ["in", "in", "out"]
    assert all(e["snapshot"] for e in items), "the start frame's snapshot survives the instant end"
    text = svc.metrics_for_test.render().decode()
    assert ('campusguard_line_crossings_total{camera_id="lane",class_name="person",direction="in",'
            'line="gate/entry"} 2.0') in text
