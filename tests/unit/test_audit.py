"""The audit trail (app/core/audit.py, app/rules/store/audit.py, GET /audit) on the production app
in-process with a real event store: who changed what from where, refused admin attempts,
keys-file reloads, cursor paging, append-only on SQLite and PostgreSQL, retention, rules off."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
from sqlalchemy import text, update
from sqlalchemy.exc import DBAPIError

from app.api.state import state_of
from app.config import Settings
from app.core.audit import AuditEntry
from app.core.metrics import Metrics
from app.core.timeutil import utcnow
from app.rules.store.db import EventStore
from app.rules.store.schema import audit_table
from tests.support import audit_app
from tests.support.audit_app import ALICE, BOB, CAROL, as_, sha
from tests.support.inprocess import IMGSZ, inprocess_app
from tests.support.logwatch import WATCH
from tests.support.roles import api_routes
from tests.support.rules_util import H, W, at, people

pytestmark = pytest.mark.timeout(120)
env = audit_app.env  # the fixture: the site app with the three keys
ZONE = "/admin/site/cameras/{}/zones/{}"
BIKES = {"name": "bike-rack", "kind": "restricted", "polygon": [[0.3, 0.6], [0.7, 0.6], [0.7, 0.95], [0.3, 0.95]],
         "rules": [{"type": "intrusion", "classes": ["person"], "min_confidence": 0.3}]}


def crowd_event(ip) -> str:
    frame = np.zeros((H, W, 3), np.uint8)
    for t in range(0, 12):
        ip.rules.evaluate("plaza-cam", at(t), (W, H), people(3), frame)
    return ip.rules.query_events(camera_id="plaza-cam").items[0]["id"]  # written off the frame path: settled first


def test_edits_reviews_and_refusals_are_recorded_with_names_and_addresses(env):
    admin, operator, viewer = as_(env, ALICE, "10.0.0.5"), as_(env, BOB, "10.0.0.6"), as_(env, CAROL, "10.0.0.7")
    assert admin.put(ZONE.format("gate-cam", "bike-rack"), json=BIKES).status_code == 200
    event_id = crowd_event(env)
    reviewed = operator.patch(f"/events/{event_id}", json={"acknowledged": True, "note": "checked"})
    assert reviewed.status_code == 200 and reviewed.json()["reviewed_by"] == "bob"
    refused = viewer.delete(ZONE.format("gate-cam", "bike-rack"))
    assert refused.status_code == 403 and refused.json()["error"] == "insufficient_role"
    assert admin.post("/admin/cameras/plaza-cam/reset").status_code == 200
    assert admin.post("/admin/reload").status_code == 200
    assert operator.get("/audit").status_code == 403  # the trail is for admins (and this is an admin attempt)

    page = admin.get("/audit").json()
    records = {r["action"]: r for r in page["items"]}
    assert [r["action"] for r in page["items"]] == ["auth.refused", "site.reload", "camera.reset", "auth.refused",
                                                    "event.review", "zone.put"]
    zone = records["zone.put"]
    assert (zone["actor"], zone["client"], zone["target"], zone["outcome"]) == ("alice", "10.0.0.5",
                                                                                "gate-cam/bike-rack", "ok")
    assert zone["before"] is None and '"name":"bike-rack"' in zone["after"] and zone["at"]
    review = records["event.review"]
    assert (review["actor"], review["client"], review["target"]) == ("bob", "10.0.0.6", event_id)
    assert '"acknowledged":false' in review["before"] and '"acknowledged":true' in review["after"]
    denied = [r for r in page["items"] if r["action"] == "auth.refused"]
    carol = "key:" + sha(CAROL)[:8]
    assert [(r["actor"], r["client"], r["outcome"], r["after"], r["target"]) for r in denied] == [
        ("bob", "10.0.0.6", "refused", "insufficient_role", "GET /audit"),
        (carol, "10.0.0.7", "refused", "insufficient_role", f"DELETE {ZONE.format('gate-cam', 'bike-rack')}")]
    assert records["camera.reset"]["target"] == "plaza-cam" and records["site.reload"]["actor"] == "alice"
    assert records["camera.reset"]["after"].endswith("open event(s) ended")
    assert not any(key in str(page) for key in (ALICE, BOB, CAROL))


def test_a_zone_edit_and_delete_record_before_and_after(env):
    admin = as_(env, ALICE, "10.0.0.5")
    renamed = {**BIKES, "polygon": [[0.1, 0.1], [0.2, 0.1], [0.2, 0.2]]}
    admin.put(ZONE.format("gate-cam", "bike-rack"), json=BIKES)
    admin.put(ZONE.format("gate-cam", "bike-rack"), json=renamed)
    admin.delete(ZONE.format("gate-cam", "bike-rack"))
    edit, put, _ = admin.get("/audit", params={"actor": "alice"}).json()["items"]
    assert edit["action"] == "zone.delete" and "[0.1,0.1]" in edit["before"] and edit["after"] is None
    assert "[0.3,0.6]" in put["before"] and "[0.1,0.1]" in put["after"]


def test_a_wrong_key_on_an_admin_route_is_recorded_and_a_keys_file_reload_too(env):
    wrong = "wrong-admin-guess-12345"
    WATCH.remember(wrong)
    assert as_(env, wrong, "10.0.0.9").post("/admin/reload").status_code == 403
    assert as_(env, wrong, "10.0.0.9").get("/events").status_code == 403  # not an admin route: counted, not audited
    env.keys.write_text(f"- {{name: alice, role: admin, sha256: {sha(ALICE)}}}\n")  # bob leaves
    assert state_of(env.app).gate.keys.check() is False  # changed: applied once it held still for one check
    assert state_of(env.app).gate.keys.check() is True
    assert as_(env, BOB, "10.0.0.6").get("/events").status_code == 403
    got = as_(env, ALICE, "10.0.0.5").get("/audit")
    items = got.json()["items"]
    assert len(items) == 2, got.text
    reload, refused = items
    assert (reload["action"], reload["actor"], reload["target"]) == ("keys.reload", "system:file_changed",
                                                                     str(env.keys))
    assert reload["before"] == "alice (admin), bob (operator)" and reload["after"] == "alice (admin)"
    assert (refused["actor"], refused["outcome"], refused["target"]) == ("key:" + sha(wrong)[:8], "refused",
                                                                          "POST /admin/reload")


def test_cursor_pages_newest_first_without_gaps_or_repeats(env):
    audit = state_of(env.app).gate.audit.get()
    for i in range(7):
        audit.record(AuditEntry(actor="alice", action="camera.reset", target=f"cam-{i}", client="10.0.0.1"))
    admin = as_(env, ALICE, "10.0.0.5")
    seen, cursor = [], None
    while True:
        body = admin.get("/audit", params={"limit": 3, **({"cursor": cursor} if cursor else {})}).json()
        seen += [r["target"] for r in body["items"]]
        cursor = body["next_cursor"]
        if cursor is None:
            break
    assert seen == [f"cam-{i}" for i in reversed(range(7))]
    assert admin.get("/audit", params={"cursor": "x1"}).status_code == 422
    assert admin.get("/audit", params={"cursor": "99999999999999999"}).json()["items"][0]["target"] == "cam-6"
    assert admin.get("/audit", params={"action": "zone.put"}).json() == {"items": [], "next_cursor": None}


def test_no_route_changes_a_record(env):
    routes = {(m, path) for m, path in api_routes(env.app.routes) if "audit" in path}
    assert routes == {("GET", "/audit")}
    admin = as_(env, ALICE, "10.0.0.5")
    admin.post("/admin/reload")
    for method in ("PUT", "PATCH", "DELETE", "POST"):
        assert admin.request(method, "/audit").status_code == 405
        assert admin.request(method, "/audit/1").status_code == 404
    assert len(admin.get("/audit").json()["items"]) == 1


def test_the_store_refuses_updates_and_retention_deletes_old_records(db_url):
    store = EventStore(db_url)
    try:
        old = utcnow() - dt.timedelta(days=400)
        store.audit.append([AuditEntry(actor="alice", action="zone.put", target="a/b", at=old),
                            AuditEntry(actor="bob", action="event.review", target="e1")])
        with pytest.raises(DBAPIError, match="append-only"):
            with store.engine.begin() as conn:
                conn.execute(update(audit_table).values(actor="mallory"))
        from app.rules.store.retention import RetentionOptions, RetentionSweeper

        class NoFiles:
            def all_of(self, event_id):
                return []

            def listing(self):
                return []

        swept = RetentionSweeper(store, NoFiles(), RetentionOptions(audit_retain_days=365), Metrics()).sweep()
        assert swept["audit"] == 1
        items, cursor = store.audit.page(cursor=None, limit=10)
        assert [i["actor"] for i in items] == ["bob"] and cursor is None
        with store.engine.connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM campusguard_audit")).scalar_one() == 1
    finally:
        store.close()


def test_rules_off_means_audit_off():
    s = Settings(imgsz=IMGSZ, threads=1, preprocess_workers=1, warmup_iters=0, api_keys=ALICE)
    with inprocess_app(s) as ip:
        r = ip.client.get("/audit", headers={"x-api-key": ALICE})
        assert r.status_code == 404 and r.json()["error"] == "audit_disabled"
