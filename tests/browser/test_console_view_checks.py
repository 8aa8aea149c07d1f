"""Camera view checks end to end (issue 25): a real `campusguard serve` (real model, imgsz 320)
gets frames of a real COCO photo posted like a camera gateway does, with their capture times
(``timestamp=``); covering the view raises exactly one camera_view event with its
before/after snapshot, it ends after the view returns, and the console (a real Chromium)
shows the badge on the camera's tile and the pair on the event; an operator accepts a view
moved on purpose from the Events page and is reminded to check the zones."""

from __future__ import annotations

import datetime as dt
import hashlib
import time

import cv2
import httpx
import numpy as np
import pytest
import yaml

from tests.browser.conftest import client, console_server, screenshot
from tests.support.images import encode
from tests.support.viewcheck import Camera, tape

KEYS = {"viewer": "view-checks-viewer-1", "operator": "view-checks-operator-1", "admin": "view-checks-admin-1"}
FAST = {"learn_s": 10, "interval_s": 1, "persist_s": 3}  # learned in 10 s of capture time, a problem after 3 s
SCENE = 14  # a COCO street scene in which the model finds nothing large (no veto), 640 x 480


@pytest.fixture(scope="module")
def server(tmp_path_factory, weights):
    tmp = tmp_path_factory.mktemp("view-checks")
    site = tmp / "site.yaml"
    site.write_text(yaml.safe_dump({"cameras": [
        {"id": "yard-cam", "name": "Yard", "view_checks": FAST},
        {"id": "hall-cam", "name": "Hall", "view_checks": FAST}]}))
    srv = console_server(tmp, weights, site, KEYS, clips="false")
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def api(server):
    with client(server, KEYS["admin"]) as http:
        yield http


class Poster:
    """A camera gateway posting frames of one camera, one second of capture time apart."""

    def __init__(self, api: httpx.Client, camera_id: str, camera: Camera) -> None:
        self.api, self.camera_id, self.camera = api, camera_id, camera
        self.t0 = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) - dt.timedelta(minutes=30)
        self.second = 0

    def post(self, n: int, **frame) -> list[dict]:
        """n frames (``frame``: Camera.frame's effect / dx); the camera_view events they raised."""
        out = []
        for _ in range(n):
            when = self.t0 + dt.timedelta(seconds=self.second)
            self.second += 1
            r = self.api.post("/detect", files={"image": ("f.jpg", encode(self.camera.frame(**frame)), "image/jpeg")},
                              params={"camera_id": self.camera_id, "timestamp": when.isoformat()})
            assert r.status_code == 200, r.text
            out += [e for e in r.json()["events"] if e["rule"] == "camera_view"]
        return out


def goto(page, hash_: str) -> None:
    page.goto(f"/ui/#/{hash_}")
    page.wait_for_selector("body[data-ready=true]")


def wait_until(cond, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.1)


def test_covered_view_one_event_with_its_pair_the_badge_and_the_end(server, api, open_page, dataset):
    yard = Poster(api, "yard-cam", Camera.on(dataset, SCENE, size=(640, 480)))
    assert yard.post(14) == []  # the reference is learned
    page = open_page(server.url, KEYS["viewer"])
    goto(page, "cameras")
    tile = page.locator("article.tile[data-camera=yard-cam]")
    tile.locator(".frame img").wait_for(state="visible")
    assert tile.locator(".view-problem").is_hidden()

    covered = yard.post(8, effect=tape)
    assert [(e["state"], e["objects"][0]["kind"]) for e in covered] == [("started", "covered")]
    event = covered[0]
    badge = tile.locator(".view-problem")
    badge.wait_for(state="visible")  # the page refreshes by itself
    assert badge.inner_text() == "View: covered"
    assert tile.locator(".open-events").inner_text() == "1 open event"  # the camera_view event counts
    accept = tile.get_by_role("button", name="Accept this view as the new reference")
    assert accept.is_disabled() and "may not accept a camera view (needs operator)" in accept.get_attribute("title")
    assert page.locator("article.tile[data-camera=hall-cam] .view-problem").is_hidden()
    screenshot(page, "view-problem")

    # the event: its snapshot is the before/after pair, side by side
    goto(page, "events?camera_id=yard-cam")
    row = page.locator(f"tr[data-event='{event['id']}']")
    row.get_by_role("button", name="Open").click()
    detail = page.locator("section.detail")
    assert "view covered on yard-cam" in detail.locator("h2").inner_text()
    snap = detail.locator("img.snapshot")
    snap.wait_for(state="visible")
    page.wait_for_function("img => img.complete && img.naturalWidth > 2 * img.naturalHeight", arg=snap.element_handle())
    assert "reference view (before)" in detail.locator(".view-pair").inner_text()
    assert detail.locator(".view-kind").inner_text() == "Covered"
    pair = cv2.imdecode(np.frombuffer(api.get(event["snapshot"]).content, np.uint8), cv2.IMREAD_COLOR)
    assert pair is not None and pair.shape[1] > 2 * pair.shape[0]

    back = yard.post(8)  # the tape is gone
    assert [(e["id"], e["state"], e["objects"][0]["reason"]) for e in back] == [(event["id"], "ended", "healthy")]
    stored = api.get("/events", params={"camera_id": "yard-cam", "rule": "camera_view"}).json()["items"]
    assert [(e["id"], e["state"]) for e in stored] == [(event["id"], "ended")]  # exactly one, ended
    goto(page, "cameras")
    page.locator("article.tile[data-camera=yard-cam] .frame img").wait_for(state="visible")
    assert page.locator("article.tile[data-camera=yard-cam] .view-problem").is_hidden()
    assert page.locator("article.tile[data-camera=yard-cam] .open-events").inner_text() == "0 open events"
    metrics = api.get("/metrics").text
    assert 'campusguard_camera_view_problem{camera_id="yard-cam",kind="covered"} 0.0' in metrics
    assert 'campusguard_camera_view_problems_total{camera_id="yard-cam",kind="covered"} 1.0' in metrics


def test_operator_accepts_a_view_moved_on_purpose_and_is_reminded_of_the_zones(server, api, open_page, dataset):
    hall = Poster(api, "hall-cam", Camera.on(dataset, SCENE, size=(640, 480), seed=3))
    assert hall.post(14) == []
    moved = hall.post(8, dx=0.25)
    assert [(e["state"], e["objects"][0]["kind"]) for e in moved] == [("started", "moved")]
    page = open_page(server.url, KEYS["operator"])
    goto(page, "events?camera_id=hall-cam")
    page.locator(f"tr[data-event='{moved[0]['id']}']").get_by_role("button", name="Open").click()
    detail = page.locator("section.detail")
    page.once("dialog", lambda dialog: dialog.accept())  # "Accept the current view of hall-cam ...?"
    detail.get_by_role("button", name="Accept this view as the new reference").click()
    note = detail.locator(".accept-result.ok")
    note.wait_for()
    assert "reference; ended: moved." in note.inner_text() and "redraw" in note.inner_text()
    assert note.get_by_role("link", name="Open the zone editor").get_attribute("href") == "#/zones?camera=hall-cam"
    ended = api.get(f"/events/{moved[0]['id']}").json()
    assert ended["state"] == "ended" and ended["objects"][0]["reason"] == "accepted"
    page.wait_for_function("() => document.querySelector('section.detail').textContent.includes('an operator accepted')")
    assert hall.post(8, dx=0.25) == []  # the moved view is the reference now
    operator = "key:" + hashlib.sha256(KEYS["operator"].encode()).hexdigest()[:8]
    records = api.get("/audit", params={"action": "camera.view_accept"}).json()["items"]
    assert [(r["actor"], r["target"]) for r in records] == [(operator, "hall-cam")]
