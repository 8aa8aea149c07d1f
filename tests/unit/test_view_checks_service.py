"""Camera view checks in the service (issue 25), in-process over a fake detector: frames of a
real COCO photo posted to /detect with their capture times (``timestamp=``); the camera_view
event with its before/after snapshot, webhooks, metrics and the camera's view state, a
changing resolution, reload and reset, the accept route (roles, audit trail, 404/409) and
invalid ``view_checks``. The real model, process and console: tests/browser/test_console_view_checks.py."""

from __future__ import annotations

import datetime as dt
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml
from fastapi.testclient import TestClient

from app.api.state import state_of
from app.config import Settings
from app.core.metrics import Metrics
from app.rules.service.facade import RulesService
from app.wiring import build_rules
from tests.support.images import encode
from tests.support.inprocess import IMGSZ, inprocess_app
from tests.support.logwatch import WATCH
from tests.support.rules_util import Receiver
from tests.support.viewcheck import Camera, tape

pytestmark = pytest.mark.timeout(180)
KEYS = {"viewer": "viewer-key-view-checks", "operator": "operator-key-view-checks", "admin": "admin-key-view-checks"}
WATCH.remember(*KEYS.values())
FAST = {"learn_s": 10, "interval_s": 1, "persist_s": 3}  # learned after 10 s, a problem after 3 s and 3 checks
WHOLE = [[0, 0], [1, 0], [1, 1], [0, 1]]


def site(**cameras: dict) -> dict:
    return {"cameras": [{"id": cid, **body} for cid, body in cameras.items()]}


SITE = site(**{"cam-a": {"view_checks": FAST, "zones": [
    {"name": "yard", "polygon": WHOLE, "rules": [{"type": "intrusion", "cooldown_s": 0}]}]},
    "cam-b": {"view_checks": FAST}, "cam-off": {"view_checks": {"enabled": False}}})


def key_name(role: str) -> str:
    return "key:" + hashlib.sha256(KEYS[role].encode()).hexdigest()[:8]


@dataclass
class Env:
    client: TestClient
    rules: RulesService
    metrics: Metrics
    site: Path
    receiver: Receiver
    t0: dt.datetime

    def as_(self, role: str) -> TestClient:
        return TestClient(self.client.app, headers={"x-api-key": KEYS[role]}, raise_server_exceptions=False)

    def post(self, camera: str, second: float, frame: np.ndarray) -> list[dict]:
        """One frame as a camera gateway posts it, captured ``second`` s after t0; its events."""
        r = self.client.post("/detect", files={"image": ("f.jpg", encode(frame), "image/jpeg")},
                             params={"camera_id": camera, "timestamp": (self.t0 + dt.timedelta(seconds=second)).isoformat()})
        assert r.status_code == 200, r.text
        return r.json()["events"]

    def feed(self, camera: str, seconds: range, make) -> list[dict]:
        return [e for s in seconds for e in self.post(camera, s, make())]

    def gauge(self, camera: str, kind: str) -> float | None:
        return self.metrics.registry.get_sample_value("campusguard_camera_view_problem",
                                                      {"camera_id": camera, "kind": kind})

    def view(self, camera: str) -> dict:
        r = self.client.get(f"/cameras/{camera}")
        assert r.status_code == 200, r.text
        return r.json()["view"]


@pytest.fixture
def env(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(SITE))
    receiver = Receiver()
    s = Settings(imgsz=IMGSZ, threads=1, preprocess_workers=1, warmup_iters=0, site_config=path,
                 events_db_url=f"sqlite:///{tmp_path}/e.db", snapshot_dir=tmp_path / "snaps", clips=False,
                 webhook_urls=receiver.url, webhook_secret="view-checks-webhook-secret", webhook_max_backoff_s=1.0,
                 api_keys=",".join(f"{role}:{key}" for role, key in KEYS.items()), site_watch_s=0)
    metrics = Metrics()
    rules = build_rules(s, metrics)
    assert isinstance(rules, RulesService)
    rules.start()
    try:
        with inprocess_app(s, rules=rules) as ip:
            client = TestClient(ip.app, headers={"x-api-key": KEYS["admin"]}, raise_server_exceptions=False)
            t0 = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) - dt.timedelta(hours=2)
            yield Env(client, rules, metrics, path, receiver, t0)
    finally:
        rules.stop()
        receiver.close()


@pytest.fixture
def camera(dataset) -> Camera:
    return Camera.on(dataset, 3)


def view_events(events: list[dict]) -> list[dict]:
    return [e for e in events if e["rule"] == "camera_view"]


def edges(img: np.ndarray) -> float:
    return float(np.abs(cv2.Laplacian(cv2.cvtColor(img, cv2.COLOR_BGR2GRAY), cv2.CV_32F)).mean())


def wait_until(cond, timeout: float = 20.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.05)
    return cond()


def test_covering_the_view_raises_one_event_with_its_pair_ended_when_the_view_returns(env, camera):
    assert env.gauge("cam-a", "covered") == 0 and env.gauge("cam-b", "frozen") == 0  # declared from the start
    assert view_events(env.feed("cam-a", range(0, 14), camera.frame)) == []
    assert env.view("cam-a")["learned"]["day"] is not None
    covered = view_events(env.feed("cam-a", range(14, 22), lambda: camera.frame(tape)))
    assert [(e["state"], e["objects"][0]["kind"]) for e in covered] == [("started", "covered")]
    started = covered[0]
    assert (started["zone"], started["rule_type"]) == ("", "camera_view")
    assert started["snapshot"] == f"/events/{started['id']}/snapshot" and started["clip"] is None
    state = env.view("cam-a")
    assert state["problems"] == ["covered"] and state["open_events"] == {"covered": started["id"]}
    assert state["checks"]["covered"]["status"] == "problem" and env.gauge("cam-a", "covered") == 1
    back = view_events(env.feed("cam-a", range(22, 32), camera.frame))
    assert [(e["id"], e["state"], e["objects"][0]["reason"]) for e in back] == [(started["id"], "ended", "healthy")]
    assert env.gauge("cam-a", "covered") == 0 and env.view("cam-a")["problems"] == []
    counted = {"camera_id": "cam-a", "kind": "covered"}
    assert env.metrics.registry.get_sample_value("campusguard_camera_view_problems_total", counted) == 1
    assert env.metrics.registry.get_sample_value("campusguard_view_check_seconds_count") >= 30

    # stored: one event, ended, its kind and reason; the snapshot is the before/after pair
    listed = env.client.get("/events", params={"rule": "camera_view"}).json()["items"]
    assert [(e["id"], e["state"], e["objects"][0]["kind"]) for e in listed] == [(started["id"], "ended", "covered")]
    jpeg = env.client.get(started["snapshot"])
    assert jpeg.status_code == 200 and jpeg.headers["content-type"] == "image/jpeg"
    pair = cv2.imdecode(np.frombuffer(jpeg.content, np.uint8), cv2.IMREAD_COLOR)
    h, w = pair.shape[:2]
    assert w > 2 * h  # two panels side by side
    before, after = pair[40:, : w // 2 - 10], pair[40:, w // 2 + 10:]
    tape_bgr = tape(camera.frame(noise=0))
    assert np.abs(after.mean(axis=(0, 1)) - tape_bgr.mean(axis=(0, 1))).max() < 25  # the tape, now
    assert edges(before) > 3 * edges(after)  # the scene's structure, before

    # delivered: the webhook carries the kind and the snapshot's URL, start and end
    assert wait_until(lambda: {f"{started['id']}:started", f"{started['id']}:ended"} <= set(env.receiver.keys()))
    sent = env.receiver.unique_events()[f"{started['id']}:started"]["event"]
    assert sent["snapshot"] == started["snapshot"] and sent["objects"][0]["kind"] == "covered"
    assert view_events(env.feed("cam-b", range(0, 4), camera.frame)) == []  # other cameras: their own monitor


def test_a_camera_changing_resolution_relearns_instead_of_alarming(env, dataset):
    small, large = Camera.on(dataset, 5, size=(320, 240)), Camera.on(dataset, 5, size=(640, 480), seed=1)
    assert view_events(env.feed("cam-a", range(0, 14), small.frame)) == []
    learned_small = env.view("cam-a")["learned"]["day"]
    assert learned_small is not None and env.view("cam-a")["frame_size"] == [320, 240]
    assert view_events(env.feed("cam-a", range(14, 18), large.frame)) == []
    state = env.view("cam-a")
    assert state["frame_size"] == [640, 480] and state["learned"]["day"] is None and state["learning"] < 1
    assert view_events(env.feed("cam-a", range(18, 34), large.frame)) == []
    relearned = env.view("cam-a")["learned"]["day"]
    assert relearned is not None and relearned > learned_small
    # sizes flipping frame after frame never learn anything to compare with, so never alarm
    flip = iter([small, large] * 20)
    assert view_events(env.feed("cam-a", range(34, 64), lambda: next(flip).frame(tape))) == []
    assert env.view("cam-a")["problems"] == []


def test_accept_route_roles_audit_and_refusals(env, camera):
    assert env.as_("viewer").post("/cameras/cam-a/view/accept").json()["error"] == "insufficient_role"
    unknown = env.as_("operator").post("/cameras/nope/view/accept")
    assert unknown.status_code == 404 and unknown.json()["error"] == "unknown_camera"
    fresh = env.as_("operator").post("/cameras/cam-b/view/accept")
    assert fresh.status_code == 409 and fresh.json()["error"] == "view_not_checked"
    env.feed("cam-off", range(0, 3), camera.frame)
    off = env.as_("operator").post("/cameras/cam-off/view/accept")
    assert off.status_code == 409 and off.json()["error"] == "view_checks_disabled"
    assert env.view("cam-off")["enabled"] is False and env.view("cam-off")["checks"]["covered"]["status"] == "off"

    env.feed("cam-a", range(0, 14), camera.frame)
    moved = view_events(env.feed("cam-a", range(14, 22), lambda: camera.frame(dx=0.25)))
    assert [(e["state"], e["objects"][0]["kind"]) for e in moved] == [("started", "moved")]
    done = env.as_("operator").post("/cameras/cam-a/view/accept")
    assert done.status_code == 200, done.text
    body = done.json()
    assert body["ended_events"] == [moved[0]["id"]] and body["ended_kinds"] == ["moved"] and body["mode"] == "day"
    assert "redraw" in body["reminder"] and "zone editor" in body["reminder"]
    ended = env.client.get(f"/events/{moved[0]['id']}").json()
    assert ended["state"] == "ended" and ended["objects"][0]["reason"] == "accepted"
    assert env.gauge("cam-a", "moved") == 0
    assert view_events(env.feed("cam-a", range(22, 34), lambda: camera.frame(dx=0.25))) == []  # the new reference

    records = env.client.get("/audit", params={"action": "camera.view_accept"}).json()["items"]
    assert len(records) == 1  # refused calls changed nothing and are not records of a change
    rec = records[0]
    assert (rec["actor"], rec["target"], rec["outcome"]) == (key_name("operator"), "cam-a", "ok")
    assert '"moved"' in rec["before"] and moved[0]["id"] in rec["after"]


def test_reload_applies_view_checks_keeping_references_and_rules_and_reset_relearns(env, camera):
    first = env.post("cam-a", 0, camera.frame())
    intrusion = [e for e in first if e["rule"] == "intrusion"]
    assert len(intrusion) == 1  # the fake detector's person, in the yard: an open rule event
    env.feed("cam-a", range(1, 14), camera.frame)
    learned = env.view("cam-a")["learned"]["day"]
    cam_a = {k: v for k, v in SITE["cameras"][0].items() if k != "id"}  # zones unchanged, cam-off removed
    changed = site(**{"cam-a": {**cam_a, "view_checks": {**FAST, "sensitivity": "high", "checks": ["covered", "moved"]}},
                      "cam-b": {"view_checks": FAST}})
    env.site.write_text(yaml.safe_dump(changed))
    assert env.client.post("/admin/reload").status_code == 200
    state = env.view("cam-a")
    assert state["learned"]["day"] == learned  # the reference stays
    assert state["checks"]["frozen"]["status"] == "off" and state["checks"]["covered"]["status"] == "ok"
    assert [e["id"] for e in env.client.get("/cameras/cam-a").json()["open_events"]] == [intrusion[0]["id"]]
    assert env.gauge("cam-off", "covered") is None  # removed from the site file: its gauges go

    covered = view_events(env.feed("cam-a", range(14, 22), lambda: camera.frame(tape)))
    assert [e["state"] for e in covered] == ["started"]
    reset = env.client.post("/admin/cameras/cam-a/reset")
    assert reset.status_code == 200 and reset.json()["ended_events"] == 2  # the intrusion and the view problem
    ended = env.client.get(f"/events/{covered[0]['id']}").json()
    assert ended["objects"][0]["reason"] == "relearning"
    assert env.view("cam-a")["learned"]["day"] is None and env.gauge("cam-a", "covered") == 0


@pytest.mark.parametrize(("view_checks", "field", "message"), [
    ({"persist_s": "10"}, "view_checks.persist_s", "valid number"),
    ({"sensitivity": "paranoid"}, "view_checks.sensitivity", "'low', 'normal' or 'high'"),
    ({"interval_s": 0.1}, "view_checks.interval_s", "greater than or equal to 0.5"),
    ({"checks": ["covered", "smudged"]}, "view_checks.checks[1]", "blinded"),
    ({"enabled": "yes"}, "view_checks.enabled", "valid boolean"),
    ({"veto_area": float("nan")}, "view_checks.veto_area", "finite number"),
    ({"persistence": 10}, "view_checks.persistence", "Extra inputs are not permitted"),
    ({"interval_s": 30, "max_gap_s": 10}, "view_checks.max_gap_s", "at least interval_s"),
])
def test_invalid_view_checks_are_refused_with_the_field_named(env, view_checks, field, message):
    before = env.client.get("/site").json()["version"]
    bad = site(**{"cam-a": {"view_checks": view_checks}})
    env.site.write_text(yaml.safe_dump(bad))
    r = env.client.post("/admin/reload")
    assert r.status_code == 422 and r.json()["error"] == "invalid_site_config", r.text
    detail = r.json()["detail"]
    assert any(d.startswith(f"cameras[0].{field}:") and message in d for d in detail), detail
    assert env.client.get("/site").json()["version"] == before  # nothing changed
    assert env.view("cam-b")["enabled"] is True
    # the zone editor's schema is the zone's: view checks are not part of it
    assert "view_checks" not in env.client.get("/site/schema").text


def test_without_a_site_file_nothing_is_view_checked(camera):
    """Checks run for the cameras of the site file only: rules off, a camera posting taped
    frames is never checked, and there is no accept route (the rules' routes are not mounted)."""
    with inprocess_app() as ip:
        t0 = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) - dt.timedelta(hours=1)
        for s in range(20):
            frame = camera.frame(tape) if s >= 12 else camera.frame()
            r = ip.client.post("/detect", files={"image": ("f.jpg", encode(frame), "image/jpeg")},
                               params={"camera_id": "cam-a", "timestamp": (t0 + dt.timedelta(seconds=s)).isoformat()})
            assert r.status_code == 200 and r.json().get("events", []) == [], r.text
        accept = ip.client.post("/cameras/cam-a/view/accept")
        assert accept.status_code == 404 and accept.json()["error"] in ("not_found", "rules_disabled")
        registry = state_of(ip.app).metrics.registry
        assert not registry.get_sample_value("campusguard_view_check_seconds_count")
