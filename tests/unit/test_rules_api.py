"""The events router on a minimal app: list/filter/paginate, get, snapshot, reload errors, rules off."""

from __future__ import annotations

import shutil

import av
import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.core.metrics import Metrics
from app.wiring import build_rules
from tests.support.rules_util import EXAMPLE_SITE, H, W, at, people
from tests.support.rules_api_app import make_app


def service_with_three_events(tmp_path):
    path = tmp_path / "site.yaml"
    shutil.copy(EXAMPLE_SITE, path)
    svc = build_rules(Settings(site_config=path, events_db_url=f"sqlite:///{tmp_path}/e.db",
                                              snapshot_dir=tmp_path / "snaps"), Metrics())
    import numpy as np

    frame = np.zeros((H, W, 3), np.uint8)
    # three crowd events on plaza-cam (each: 10 s of crowd, then 5 s empty, then the 60 s cool-down)
    for k in range(3):
        base = k * 100
        for t in range(0, 11):
            svc.evaluate("plaza-cam", at(base + t), (W, H), people(3), frame)
        for t in range(11, 16):
            svc.evaluate("plaza-cam", at(base + t), (W, H), [], frame)
    svc.path_for_test = path
    return svc


@pytest.fixture
def rules(tmp_path):
    svc = service_with_three_events(tmp_path)
    yield svc
    svc.stop()


@pytest.fixture(scope="module")
def unchanged_rules(tmp_path_factory):
    """One service for the tests whose requests are all refused (nothing in it changes)."""
    svc = service_with_three_events(tmp_path_factory.mktemp("refused"))
    yield svc
    svc.stop()


def test_list_filter_paginate_and_get(rules):
    client = TestClient(make_app(rules))
    body = client.get("/events").json()
    assert body["total"] == 3 and body["limit"] == 50 and body["offset"] == 0
    items = body["items"]
    assert [e["started_at"] for e in items] == sorted((e["started_at"] for e in items), reverse=True)
    assert all(e["state"] == "ended" and e["rule"] == "crowd" for e in items)

    page = client.get("/events", params={"limit": 2, "offset": 2}).json()
    assert page["total"] == 3 and [e["id"] for e in page["items"]] == [items[2]["id"]]
    assert client.get("/events", params={"camera_id": "gate-cam"}).json()["total"] == 0
    assert client.get("/events", params={"zone": "plaza", "rule": "crowd"}).json()["total"] == 3
    rng = client.get("/events", params={"since": "2026-03-02T12:01:00Z", "until": "2026-03-02T12:03:00"}).json()
    assert rng["total"] == 1 and rng["items"][0]["started_at"] == "2026-03-02T12:01:50Z"

    one = client.get(f"/events/{items[0]['id']}").json()
    assert one == items[0]
    snap = client.get(one["snapshot"])
    assert snap.status_code == 200 and snap.headers["content-type"] == "image/jpeg"

    missing = client.get("/events/doesnotexist")
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    assert client.get("/events/doesnotexist/snapshot").status_code == 404


@pytest.mark.parametrize("params", [
    {"limit": 0}, {"limit": 501}, {"offset": -1}, {"since": "yesterday"},
    {"since": "9999-12-31T23:59:59-10:00"}, {"until": "0001-01-01T00:00:00+05:00"},
    {"offset": 9223372036854775808}, {"offset": 2**63 - 1}, {"until": "0.5"}, {"since": "99999999999999"},
    {"since": "\uff12\uff10\uff12\uff16-03-02T12:00:00Z"}])
def test_bad_query_parameters(unchanged_rules, params):
    rules = unchanged_rules
    r = TestClient(make_app(rules)).get("/events", params=params)
    assert r.status_code == 422 and r.json()["error"] == "invalid_parameter"


def test_reload_ok_and_bad(rules):
    client = TestClient(make_app(rules))
    r = client.post("/admin/reload")
    assert r.status_code == 200 and r.json()["cameras"] == ["gate-cam", "plaza-cam", "lot-cam", "door-cam", "entrance-cam"]
    rules.path_for_test.write_text("cameras:\n  - id: gate-cam\n    zones: [{name: z, polygon: [[0, 0]]}]\n"
                                   "  - {id: gate-cam, resolution: [-1, 2]}\n")
    r = client.post("/admin/reload")
    body = r.json()
    assert r.status_code == 422 and body["error"] == "invalid_site_config"
    assert len(body["detail"]) == 3 and all(isinstance(e, str) for e in body["detail"])
    assert any("duplicate camera id" in e for e in body["detail"])
    assert rules.camera_ids == ["gate-cam", "plaza-cam", "lot-cam", "door-cam", "entrance-cam"]  # old config in force


def test_rules_disabled_and_api_keys(rules):
    off = TestClient(make_app(None))
    r = off.get("/events")
    assert r.status_code == 404 and r.json()["error"] == "rules_disabled"
    assert off.post("/admin/reload").status_code == 404
    locked = TestClient(make_app(rules, keys=["k1"]))
    assert locked.get("/events").status_code == 401
    assert locked.post("/admin/reload", headers={"X-API-Key": "bad"}).status_code == 403
    assert locked.get("/events", headers={"X-API-Key": "k1"}).status_code == 200


def test_clip_route_serves_the_mp4_once_written(rules, tmp_path):
    client = TestClient(make_app(rules, keys=["k1"]))
    key = {"X-API-Key": "k1"}
    event = client.get("/events", headers=key).json()["items"][0]
    assert event["clip"] == f"/events/{event['id']}/clip.mp4"
    before = client.get(event["clip"], headers=key)  # the clip thread has not run yet
    assert before.status_code == 404 and before.json()["error"] == "not_found"
    # every event has ended, so all three are due; with no clip thread running, the two older
    # events' frames have left the ring (its horizon is pre + post + 2 s): those are forgotten
    assert rules.clips.write_due() == 1
    assert [e["clip"] for e in client.get("/events", headers=key).json()["items"][1:]] == [None, None]
    assert client.get(event["clip"]).status_code == 401
    got = client.get(event["clip"], headers=key)
    assert got.status_code == 200 and got.headers["content-type"] == "video/mp4"
    (tmp_path / "got.mp4").write_bytes(got.content)
    with av.open(str(tmp_path / "got.mp4")) as container:
        assert container.streams.video[0].codec_context.name == "h264"
        assert sum(1 for _ in container.decode(video=0)) >= 2
    missing = client.get("/events/doesnotexist/clip.mp4", headers=key)
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"
    assert client.get("/events/../clip.mp4", headers=key).status_code == 404


def test_long_ids_are_not_echoed_whole(unchanged_rules):
    rules = unchanged_rules
    r = TestClient(make_app(rules)).get("/events/" + "x" * 5000)
    assert r.status_code == 404 and len(r.json()["message"]) < 200
def test_patch_acknowledge_false_positive_and_filters(rules):
    client = TestClient(make_app(rules, keys=["k1"]))
    auth = {"x-api-key": "k1"}
    ids = [e["id"] for e in client.get("/events", headers=auth).json()["items"]]
    assert client.patch(f"/events/{ids[0]}", json={"acknowledged": True}).status_code == 401  # operator auth

    r = client.patch(f"/events/{ids[0]}", json={"acknowledged": True, "note": "guard sent", "operator": "alice"},
                     headers=auth)
    assert r.status_code == 200
    body = r.json()
    assert body["acknowledged"] is True and body["false_positive"] is False and body["note"] == "guard sent"
    assert body["reviewed_by"].startswith("alice (key:") and "k1" not in body["reviewed_by"]
    assert body["reviewed_at"] is not None and body["state"] == "ended"
    fp = client.patch(f"/events/{ids[1]}", json={"false_positive": True}, headers=auth).json()
    assert fp["false_positive"] is True and fp["reviewed_by"].startswith("key:")
    assert client.get(f"/events/{ids[0]}", headers=auth).json() == body  # stored

    def listed(**params):
        return [e["id"] for e in client.get("/events", params=params, headers=auth).json()["items"]]

    assert listed(acknowledged="true") == [ids[0]]
    assert listed(acknowledged="false") == ids[1:]
    assert listed(false_positive="true") == [ids[1]]
    assert listed(acknowledged="false", false_positive="false") == [ids[2]]

    missing = client.patch("/events/nope", json={"acknowledged": True}, headers=auth)
    assert missing.status_code == 404 and missing.json()["error"] == "not_found"


@pytest.mark.parametrize("body", [{}, {"acknowledged": "maybe"}, {"acknowledged": True, "colour": "red"},
                                  {"note": "x" * 2001}, {"operator": "bob"}, [1, 2], "text"])
def test_patch_bad_body_is_422(unchanged_rules, body):
    rules = unchanged_rules
    event_id = rules.query_events().items[0]["id"]
    r = TestClient(make_app(rules)).patch(f"/events/{event_id}", json=body)
    assert r.status_code == 422 and r.json()["error"] == "invalid_parameter"
    assert rules.get_event(event_id)["reviewed_at"] is None


def test_cursor_pages_to_the_end_and_bad_cursors_are_422(rules):
    client = TestClient(make_app(rules))
    first = client.get("/events", params={"limit": 2}).json()
    assert first["total"] == 3 and first["total_exact"] is True and first["next_cursor"]
    second = client.get("/events", params={"limit": 2, "cursor": first["next_cursor"]}).json()
    assert second["next_cursor"] is None and len(second["items"]) == 1
    everything = client.get("/events").json()["items"]
    assert [e["id"] for e in first["items"] + second["items"]] == [e["id"] for e in everything]
    for bad in ("nope", "W10", "WyJ4IiwgMV0", "x" * 201):  # not base64 JSON, [], ["x", 1], too long
        r = client.get("/events", params={"cursor": bad})
        assert r.status_code == 422 and r.json()["error"] == "invalid_parameter", (bad, r.text)
    deep = client.get("/events", params={"offset": 10_001})
    assert deep.status_code == 422 and "offset" in deep.text
