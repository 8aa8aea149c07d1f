"""The shared fleet state in-process: two rules services (replicas "r1" and "r2") on one SQLite
store, the writer's batches driven by hand (``fleet.writer.tick()``), read through the real app.

What a camera's owner holds in memory (status, frame times, open events, crossing counts, the
newest frame) is what the other replica answers after one batch; counts survive a restart; a
silent owner is shown stale (and offline past the camera's threshold); the newest frame owns
the row; rows a broken or hostile writer left answer 200 with the odd parts dropped.
"""

from __future__ import annotations

import datetime as dt
import time

import numpy as np
import pytest
import yaml

from app.config import Settings
from app.core.metrics import Metrics
from app.core.timeutil import utcnow
from app.rules.store.fleet import Crossing
from app.wiring import build_rules
from tests.support.inprocess import IMGSZ, inprocess_app
from tests.support.rules_util import H, W, at, det

CAM = "lane"
SITE = {"cameras": [
    {"id": CAM, "name": "Lane", "area": "north", "offline_after_s": 30, "zones": [
        {"name": "gate", "polygon": [[0, 0], [1, 0], [1, 1], [0, 1]], "rules": [
            {"type": "line_crossing", "name": "entry", "line": [[0.0, 0.5], [1.0, 0.5]], "classes": ["person", "car"]},
            {"type": "intrusion", "name": "no-entry", "classes": ["person"]}]}]},
    {"id": "quiet", "zones": []}]}
SAME = ("status", "last_frame_at", "last_seen_at", "reported_by")


def service(tmp_path, replica: str, **settings):
    path = tmp_path / "site.yaml"
    if not path.exists():
        path.write_text(yaml.safe_dump(SITE))
    svc = build_rules(settings := Settings(
        site_config=path, events_db_url=f"sqlite:///{tmp_path}/shared.db", snapshot_dir=tmp_path / f"snaps-{replica}",
        replica_id=replica, imgsz=IMGSZ, threads=1, preprocess_workers=1, warmup_iters=0, **settings), Metrics())
    svc.settings_for_test = settings
    svc.fleet.rows.read_ttl_s = 0  # every read sees the last batch (the 0.5 s read cache is for many consoles)
    return svc


def walk_in(svc, t0: float = 0.0, x: float = 0.5) -> None:
    """One person walks down across the line (a crossing) and stays in the zone (an open intrusion)."""
    frame = np.full((H // 4, W // 4, 3), 120, np.uint8)
    for i in range(9):
        svc.evaluate(CAM, at(t0 + i), (W, H), [det("person", x, 0.3 + 0.05 * i)], frame)


@pytest.fixture
def pair(tmp_path):
    r1, r2 = service(tmp_path, "r1"), service(tmp_path, "r2")
    yield r1, r2
    r2.stop()
    r1.stop()


def doc(svc, camera_id: str = CAM) -> dict:
    return next(c for c in svc.cameras() if c["id"] == camera_id)


def test_the_other_replica_answers_the_owners_state_after_one_batch(pair):
    r1, r2 = pair
    walk_in(r1)
    assert doc(r2)["status"] == "never_seen" and doc(r2)["reported_by"] is None  # nothing shared yet
    assert r1.fleet.writer.tick() == 1  # one changed camera: one row (the silent camera none)
    mine, theirs = doc(r1), doc(r2)
    assert mine["status"] == "online" and mine["reported_by"] == "r1" and not mine["stale"]
    assert {k: theirs[k] for k in SAME} == {k: mine[k] for k in SAME}
    assert [e["id"] for e in theirs["open_events"]] == [e["id"] for e in mine["open_events"]] != []
    assert theirs["stale"] is False and theirs["name"] == "Lane" and theirs["area"] == "north"
    assert r2.counts(CAM, None) == r1.counts(CAM, None)
    assert r2.counts(CAM, None)["counts"] == [{"line": "gate/entry", "direction": "in", "class_name": "person",
                                               "count": 1}]
    assert r1.fleet.writer.tick() == 0  # unchanged: nothing rewritten (the heartbeat only)

    with inprocess_app(r2.settings_for_test, rules=r2) as app:
        c = app.client
        listed = {x["id"]: x for x in c.get("/cameras").json()}
        one = c.get(f"/cameras/{CAM}").json()
        assert listed[CAM]["status"] == one["status"] == "online" and one["reported_by"] == "r1"
        assert listed["quiet"]["status"] == "never_seen"
        tiles = {x["id"]: x for x in c.get("/camera-summary").json()["items"]}
        assert tiles[CAM]["status"] == "online" and tiles[CAM]["reported_by"] == "r1"
        assert tiles[CAM]["open_events"] == len(mine["open_events"])
        counts = c.get(f"/cameras/{CAM}/counts").json()["counts"]
        assert counts == [{"line": "gate/entry", "direction": "in", "class_name": "person", "count": 1}]
        jpeg = c.get(f"/cameras/{CAM}/frame.jpg")
        assert jpeg.status_code == 200 and jpeg.content[:2] == b"\xff\xd8"
        assert jpeg.headers["X-Frame-Time"] == at(8).isoformat()
        assert c.get("/cameras/quiet/frame.jpg").json()["error"] == "no_frame"
        status = c.get("/status").json()
        assert status["replica"] == "r2" and status["fleet"]["replica"] == "r2"
        fleet = {r["id"]: r for r in status["fleet"]["replicas"]}
        assert fleet["r1"]["cameras"] == [CAM] and fleet["r1"]["stale"] is False
        assert fleet["r2"]["cameras"] == [] and fleet["r2"]["heartbeat_at"] is None  # r2 has not written yet


def test_counts_are_exact_while_a_batch_is_pending_and_survive_a_restart(tmp_path):
    r1 = service(tmp_path, "r1")
    walk_in(r1)
    walk_in(r1, t0=100, x=0.3)
    before = r1.counts(CAM, None)
    assert before["counts"][0]["count"] == 2  # nothing written yet: all from the queue
    r1.fleet.writer.tick()
    assert r1.counts(CAM, None) == before  # written: from the store, not twice
    since = r1.counts(CAM, at(50))
    assert since["counts"][0]["count"] == 1
    r1.stop()  # the restart: the memory is gone
    again = service(tmp_path, "r1")
    try:
        assert again.counts(CAM, None)["counts"] == before["counts"]
        assert again.counts(CAM, at(50))["counts"] == since["counts"]
        # the restarted replica has not seen the camera itself: the row is its previous life's
        shown = doc(again)
        assert shown["stale"] is True and shown["reported_by"] == "r1" and shown["last_frame_at"] == at(108)
        walk_in(again, t0=200, x=0.7)
        assert again.counts(CAM, None)["counts"][0]["count"] == 3
        assert doc(again)["stale"] is False and doc(again)["last_frame_at"] == at(208)
    finally:
        again.stop()


def test_a_silent_owner_is_stale_and_its_camera_offline_past_the_threshold(pair):
    r1, r2 = pair
    walk_in(r1)
    r1.fleet.writer.tick(now=utcnow() - dt.timedelta(seconds=60))  # its last heartbeat: a minute ago
    shown = doc(r2)
    assert shown["stale"] is True and shown["reported_by"] == "r1"
    assert shown["status"] == "online"  # its last frame arrived just now: within offline_after_s (30 s)
    old = utcnow() - dt.timedelta(seconds=120)
    r2.store.fleet.publish("r3", old, old, [row("r3", old)], [], [])  # r3 died two minutes ago
    gone = doc(r2, "quiet")
    assert gone["stale"] is True and gone["status"] == "offline" and gone["reported_by"] == "r3"
    assert gone["seconds_since_last_frame"] >= 120
    fleet = {r["id"]: r for r in r2.fleet_status()["replicas"]}
    assert fleet["r3"]["stale"] and fleet["r3"]["cameras"] == ["quiet"]


def row(owner: str, seen: dt.datetime, camera_id: str = "quiet", **fields) -> dict:
    return {"camera_id": camera_id, "owner": owner, "status": "online", "last_frame_at": seen, "last_seen_at": seen,
            "open_events": [], "view": None, "source": None, "updated_at": seen, **fields}


def test_the_newest_frame_owns_the_row(pair):
    r1, r2 = pair
    walk_in(r1)
    r1.fleet.writer.tick()
    walk_in(r2, t0=20)  # the camera moved to r2 (a rebalance)
    r2.fleet.writer.tick()
    r1.health.check_offline()  # nothing on r1 yet (30 s threshold): its row would be older anyway
    r1.fleet.writer._written.clear()
    r1.fleet.writer.tick()  # r1 rewrites its older state: refused by the row
    assert doc(r1)["reported_by"] == doc(r2)["reported_by"] == "r2"
    assert doc(r1)["last_frame_at"] == doc(r2)["last_frame_at"] == at(28)


def test_odd_or_hostile_rows_answer_with_the_odd_parts_left_out(pair):
    _, r2 = pair
    now = utcnow()
    evil = [{"id": "e1", "camera_id": "quiet", "objects": "<script>"}, "x", {"id": 5}, {"id": "e2", "camera_id": "other"}]
    r2.store.fleet.publish("r\u202e9", now, now, [row(
        "r\u202e9", now, status="hacked", open_events=evil, view={"enabled": "maybe", "problems": [1, "covered"]},
        source={"state": 7, "source": None})], [], [Crossing("quiet", now, "x" * 257, "in", "person")])
    with inprocess_app(r2.settings_for_test, rules=r2) as app:
        c = app.client
        one = c.get("/cameras/quiet")
        assert one.status_code == 200, one.text
        body = one.json()
        assert body["status"] == "offline" and body["open_events"] == [] and body["view"] is None
        assert body["source"] is None and body["reported_by"] == "r\u202e9"
        assert c.get("/cameras").status_code == 200
        tiles = c.get("/camera-summary")
        assert tiles.status_code == 200, tiles.text
        quiet = next(t for t in tiles.json()["items"] if t["id"] == "quiet")
        assert quiet["view_problems"] == ["covered"] and quiet["stream"] is None
        assert c.get("/cameras/quiet/counts").json()["counts"][0]["count"] == 1
        assert c.get("/status").status_code == 200


def test_an_unreachable_store_answers_from_memory(pair):
    r1, _ = pair
    walk_in(r1)
    r1.fleet.writer.tick()
    r1.writer.up = False  # as during an outage: no shared reads, no writes
    assert r1.fleet.writer.tick() == 0
    assert doc(r1)["status"] == "online" and doc(r1, "quiet")["status"] == "never_seen"
    assert r1.counts(CAM, None)["counts"][0]["count"] == 1  # this replica's memory


def test_a_gateways_stream_report_reaches_the_other_replica(tmp_path):
    """The stream state a gateway reports to the camera's replica (PUT /cameras/{id}/source) is
    part of the shared row: the other replica shows it too (app/wiring hands the SourceBook
    to the fleet writer)."""
    from app.core.sources import SourceBook

    book = SourceBook()
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(SITE))
    r1 = build_rules(Settings(site_config=path, events_db_url=f"sqlite:///{tmp_path}/shared.db",
                              snapshot_dir=tmp_path / "snaps-r1", replica_id="r1", imgsz=IMGSZ, threads=1,
                              preprocess_workers=1, warmup_iters=0), Metrics(), book)
    r2 = service(tmp_path, "r2")
    try:
        book.report(CAM, "gw-0", 300, {"source": "rtsp://10.0.0.9:554/sub", "state": "streaming",
                                        "since": utcnow().isoformat()})
        walk_in(r1)
        assert r1.fleet.writer.tick() == 1
        shown = doc(r2)["source"]
        assert shown["state"] == "streaming" and shown["reported_by"] == "gw-0" and "10.0.0.9" in shown["source"]
    finally:
        r2.stop()
        r1.stop()


def offline_events(svc) -> list[dict]:
    return svc.query_events(camera_id=CAM, rule="camera_offline").items


def test_a_camera_that_moved_to_a_live_replica_is_handed_over_not_offline(pair):
    """A rebalance moved the camera's frames from r1 to r2: when r1's sweep finds it silent past
    its threshold, r2's fresh row says it lives on there, so r1 ends its open events and raises
    no camera_offline (which would stay open at every webhook receiver)."""
    r1, r2 = pair
    walk_in(r1)  # an open intrusion on r1
    r1.fleet.writer.tick()
    opened = [e["id"] for e in doc(r1)["open_events"]]
    assert opened
    walk_in(r2, t0=20)  # the camera's frames reach r2 now
    r2.fleet.writer.tick()
    r1.health.monitor.clock = lambda: time.monotonic() + 60  # a minute later on r1: past offline_after_s (30 s)
    r1.health.check_offline()
    assert offline_events(r1) == []
    stored = {e["id"]: e for e in r1.query_events(camera_id=CAM).items}
    assert [stored[i]["state"] for i in opened] == ["ended"] * len(opened)
    assert r1.health.monitor.status(CAM) == "never_seen"  # forgotten here; reads show r2's row
    assert doc(r1)["reported_by"] == "r2" and doc(r1)["status"] == "online"


def test_a_camera_whose_new_replica_is_stale_still_goes_offline(pair):
    """The other replica's row is newer but its heartbeat is old: nobody gets the camera now."""
    r1, r2 = pair
    walk_in(r1)
    r1.fleet.writer.tick()
    walk_in(r2, t0=20)
    r2.fleet.writer.tick(now=utcnow() - dt.timedelta(seconds=60))  # r2's last heartbeat: a minute ago
    r1.health.monitor.clock = lambda: time.monotonic() + 60
    r1.health.check_offline()
    assert [e["state"] for e in offline_events(r1)] == ["started"]
