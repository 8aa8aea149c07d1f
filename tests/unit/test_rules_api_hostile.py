"""Hostile text on the events routes behaves the same on SQLite and on a real PostgreSQL (issue 23
findings 5 and 10): NUL or a lone surrogate in a query parameter or a review is 422
``invalid_parameter``, an id no event can have (NUL, 252+ characters) is 404, and nothing reaches
the store, the file system or a traceback."""

from __future__ import annotations

import json
import logging
import shutil

import numpy as np
import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.core.metrics import Metrics
from app.wiring import build_rules
from tests.support.rules_api_app import make_app
from tests.support.rules_util import EXAMPLE_SITE, H, W, at, people

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def api(db_url, tmp_path):
    """(client, service) over the given store with one crowd event on plaza-cam, its snapshot written."""
    path = tmp_path / "site.yaml"
    shutil.copy(EXAMPLE_SITE, path)
    svc = build_rules(Settings(site_config=path, events_db_url=db_url, snapshot_dir=tmp_path / "snaps"), Metrics())
    frame = np.zeros((H, W, 3), np.uint8)
    for t in range(0, 11):
        svc.evaluate("plaza-cam", at(t), (W, H), people(3), frame)
    assert svc.query_events().total == 1
    try:
        yield TestClient(make_app(svc), raise_server_exceptions=False), svc
    finally:
        svc.stop()


FILTERS = [{"camera_id": "all\x00cam"}, {"zone": "\x00"}, {"rule": "crowd\x00"},
           {"camera_id": "plaza-cam", "zone": "pla\x00za"}]
REVIEWS = ['{"acknowledged": true, "note": "a\\u0000b"}', '{"acknowledged": true, "operator": "ali\\u0000ce"}',
           '{"note": "\\ud800"}', '{"acknowledged": true, "operator": "\\udfff bob"}']
BAD_IDS = ["abc%00def", "%00", "a" * 252, "a" * 300, "f" * 5000, "0" * 65]
ROUTES = ["/events/{}", "/events/{}/snapshot", "/events/{}/clip.mp4"]


def test_nul_in_a_filter_is_422_on_every_store(api, caplog):
    client, _ = api
    with caplog.at_level(logging.ERROR):
        for params in FILTERS:
            r = client.get("/events", params=params)
            assert r.status_code == 422 and r.json()["error"] == "invalid_parameter", (params, r.text)
            assert "NUL" in r.json()["message"]
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR]  # no traceback logged


def test_nul_or_a_lone_surrogate_in_a_review_is_422_and_stores_nothing(api):
    client, svc = api
    event = svc.query_events().items[0]
    for body in REVIEWS:
        r = client.patch(f"/events/{event['id']}", content=body.encode(), headers={"content-type": "application/json"})
        assert r.status_code == 422 and r.json()["error"] == "invalid_parameter", (body, r.text)
        assert svc.get_event(event["id"]) == event
    fine = client.patch(f"/events/{event['id']}", json={"acknowledged": True, "note": "ok: gate 3 — Zoë", "operator": "Zoë"})
    assert fine.status_code == 200 and fine.json()["note"] == "ok: gate 3 — Zoë"


def test_an_id_no_event_can_have_is_404_on_every_store(api, caplog):
    client, svc = api
    with caplog.at_level(logging.ERROR):
        for event_id in BAD_IDS:
            for reply in [client.get(route.format(event_id)) for route in ROUTES] + [
                    client.patch(f"/events/{event_id}", json={"acknowledged": True})]:
                assert reply.status_code == 404 and reply.json()["error"] == "not_found", (event_id[:20], reply.text)
                assert len(reply.json()["message"]) < 200
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
    real = svc.query_events().items[0]
    assert json.loads(client.get(f"/events/{real['id']}").text)["id"] == real["id"]  # a real id still reaches the store
    assert client.get(f"/events/{real['id']}/snapshot").status_code == 200
