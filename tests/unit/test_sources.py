"""Camera streams as the service shows them (issue #24, "Visible state"): the SourceBook (the
embedded ingest's states and gateways' reports), ``campusguard_source_*`` with bounded labels,
PUT/DELETE /cameras/{id}/source (camera role, redaction, 404/422) and ``source`` in GET /cameras.
"""

from __future__ import annotations

import datetime as dt
import math
import shutil

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.config import Settings
from app.core.metrics import Metrics
from app.core.sourcemetrics import SourceCollector
from app.core.sources import STATES, SourceBook
from app.wiring import build_rules
from tests.support.inprocess import IMGSZ, inprocess_app
from tests.support.rules_util import EXAMPLE_SITE
from tests.support.sources import Clock, state

KEYS = {"camera": "camera-key-0123456789", "viewer": "viewer-key-0123456789", "admin": "admin-key-0123456789"}


def test_reports_go_stale_are_withdrawn_and_the_local_ingest_wins():
    clock, heard = Clock(), []
    book = SourceBook(clock)
    book.listeners.append(lambda cid, s: heard.append((cid, s)))
    book.report("gate-cam", "gw-0", 30, state())
    assert book.get("gate-cam")["reported_by"] == "gw-0" and book.get("gate-cam")["state"] == "streaming"
    book.report("gate-cam", "gw-0", 30, state(frames_read=11))  # same state: listeners hear nothing new
    clock.now += 31
    stale = book.get("gate-cam")
    assert stale["state"] == "unknown" and stale["last_error"] == "no report from gateway gw-0 for 31 s"
    book.sweep()
    book.set_local(lambda: {"gate-cam": state(name="connecting")})
    assert book.get("gate-cam")["state"] == "connecting" and book.get("gate-cam")["reported_by"] is None
    book.set_local(dict)
    assert book.withdraw("gate-cam") and not book.withdraw("gate-cam")
    assert book.get("gate-cam") is None and book.all() == {}
    assert heard == [("gate-cam", "streaming"), ("gate-cam", "unknown"), ("gate-cam", None)]


def test_a_reload_forgets_reports_of_removed_cameras():
    from app.rules.site.loader import load_site_config

    book = SourceBook()
    book.report("gate-cam", "gw-0", 30, state())
    book.report("gone-cam", "gw-0", 30, state("gone-cam"))
    book.applied(load_site_config(EXAMPLE_SITE))  # a SiteListener of the rules' site manager
    assert set(book.all()) == {"gate-cam"}


def families(metrics: Metrics) -> dict:
    return {f.name: f for f in text_string_to_metric_families(metrics.render().decode())}


def test_source_metrics_have_bounded_labels():
    metrics = Metrics(max_cameras=1)
    book = SourceBook()
    metrics.registry.register(SourceCollector(book, metrics.camera_label))
    book.report("a-cam", "gw", 30, state("a-cam", dropped={"superseded": 2, "http_503": 1, "x" * 40: 5}))
    book.report("b-cam", "gw", 30, state("b-cam", name="auth_failed", frames_read=5))
    book.report("c-cam", "gw", 30, state("c-cam", name="bogus", frames_read=1, last_frame_at=None))
    fams = families(metrics)
    states = {(s.labels["camera_id"], s.labels["state"]): s.value for s in fams["campusguard_source_state"].samples}
    assert {c for c, _ in states} == {"a-cam", "_other"} and {s for _, s in states} == set(STATES)
    assert states[("a-cam", "streaming")] == 1 and states[("a-cam", "auth_failed")] == 0
    assert states[("_other", "auth_failed")] == 1 and states[("_other", "unknown")] == 1  # counts under _other
    read = {s.labels["camera_id"]: s.value for s in fams["campusguard_source_frames_read"].samples
            if s.name.endswith("_total")}
    assert read == {"a-cam": 10, "_other": 6}
    drops = {(s.labels["camera_id"], s.labels["reason"]): s.value
             for s in fams["campusguard_source_frames_dropped"].samples if s.name.endswith("_total")}
    assert drops[("a-cam", "http_503")] == 1 and drops[("a-cam", "other")] == 5  # an unknown reason is "other"
    ages = {s.labels["camera_id"]: s.value for s in fams["campusguard_source_last_frame_age_seconds"].samples}
    assert ages["a-cam"] > 0 and not math.isnan(ages["_other"])


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sources")
    site = tmp / "site.yaml"
    shutil.copy(EXAMPLE_SITE, site)
    s = Settings(imgsz=IMGSZ, threads=1, preprocess_workers=1, warmup_iters=0, site_config=site,
                 api_keys=",".join(f"{role}:{key}" for role, key in KEYS.items()),
                 events_db_url=f"sqlite:///{tmp}/e.db", snapshot_dir=tmp / "snaps")
    rules = build_rules(s, Metrics())
    with inprocess_app(s, rules=rules) as ip:
        yield ip
    rules.stop()


def put(app, camera: str, body: dict, role: str = "camera"):
    return app.client.put(f"/cameras/{camera}/source", json=body, headers={"x-api-key": KEYS[role]})


def now_iso(offset_s: float = 0.0) -> str:
    return (dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=offset_s)).isoformat()


def report(**source) -> dict:
    return {"gateway": "gateway-0", "reported_at": now_iso(), "ttl_s": 30, "source": {**state(), **source}}


def test_a_gateway_report_shows_in_get_cameras_redacted(app):
    leaky = report(source="rtsp://admin:hunter2@10.0.0.5:554/ch/102?token=abc",
                   last_error="rtsp://admin:hunter2@10.0.0.5:554/ch/102?token=abc: 401 Unauthorized")
    assert put(app, "gate-cam", leaky).status_code == 204
    viewer = {"x-api-key": KEYS["viewer"]}
    listed = {c["id"]: c["source"] for c in app.client.get("/cameras", headers=viewer).json()}
    one = app.client.get("/cameras/gate-cam", headers=viewer).json()["source"]
    assert listed["gate-cam"] == one and listed["plaza-cam"] is None
    assert one["source"] == "rtsp://***@10.0.0.5:554/ch/102" and one["reported_by"] == "gateway-0"
    assert "hunter2" not in str(one) and "abc" not in str(one) and one["state"] == "streaming"
    metrics = app.client.get("/metrics", headers=viewer).text
    assert 'campusguard_source_state{camera_id="gate-cam",state="streaming"} 1.0' in metrics
    assert app.client.delete("/cameras/gate-cam/source", headers={"x-api-key": KEYS["camera"]}).status_code == 204
    assert app.client.get("/cameras/gate-cam", headers=viewer).json()["source"] is None
    assert app.client.delete("/cameras/gate-cam/source", headers={"x-api-key": KEYS["camera"]}).status_code == 404


@pytest.mark.parametrize("camera, body, role, status, code", [
    ("gate-cam", lambda: report(), "viewer", 403, "insufficient_role"),  # a viewer reads, it does not report
    ("no-such-cam", lambda: report(), "camera", 404, "unknown_camera"),
    ("gate-cam", lambda: report(state="on_fire"), "camera", 422, "invalid_parameter"),
    ("gate-cam", lambda: report(dropped={"x": -1}), "camera", 422, "invalid_parameter"),
    ("gate-cam", lambda: report(extra="field"), "camera", 422, "invalid_parameter"),
    ("gate-cam", lambda: {**report(), "ttl_s": 0}, "camera", 422, "invalid_parameter"),
    ("gate-cam", lambda: {**report(), "gateway": "bad name/../"}, "camera", 422, "invalid_parameter"),
    ("plaza-cam", lambda: report(), "admin", 204, None),
])
def test_report_is_checked(app, camera, body, role, status, code):
    reply = put(app, camera, body(), role)  # built now: reported_at must be near the server's clock
    assert reply.status_code == status, reply.text
    if code:
        assert reply.json()["error"] == code
