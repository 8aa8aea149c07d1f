"""The event side on a real PostgreSQL, end to end: the real server and model, real COCO frames.

Migrations run at startup on an empty database; events land in PostgreSQL; an operator
acknowledges one (PATCH); a silent camera goes offline and comes back; retention deletes the event whose (capture-time) end is older than
the retention, with its snapshot, by itself; the webhook gets each start/end once. And a
database that cannot be reached at startup: the server still becomes ready and says why.
"""

from __future__ import annotations

import datetime as dt
import time

import yaml

from app.cli import main as cli_main
from app.rules.store.migrate import head_revision
from tests.support.net import free_port
from tests.support.rules_e2e import CAMERA, SECRET, detect, drive_crowd, metric, pick_frames, site_copy
from tests.support.wait import wait_for
from tests.support.rules_util import Receiver


def test_postgres_store_review_and_retention(server_factory, tmp_path, dataset, pg_url, capsys):
    rx = Receiver()
    snaps = tmp_path / "snaps"
    try:
        server = server_factory(site_config=site_copy(tmp_path), events_db_url=pg_url, snapshot_dir=snaps,
                                webhook_urls=rx.url, webhook_secret=SECRET, webhook_max_backoff_s=1, imgsz=320,
                                events_retain_days=1, retention_sweep_s=1, api_keys="op-key",
                                max_capture_age_s=30 * 86400)  # frames from 10 days ago are accepted here
        auth = {"x-api-key": "op-key"}
        now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
        with server.client(headers=auth) as c:
            assert c.get("/health/ready").json() == {"status": "ready", "event_store": "ok"}
            crowd, empty = pick_frames(c, dataset)
            old = [e for _, e in drive_crowd(c, crowd, empty, now - dt.timedelta(days=10))]
            new = [e for _, e in drive_crowd(c, crowd, empty, now - dt.timedelta(minutes=5))]
            assert [e["state"] for e in old + new] == ["started", "ended"] * 2
            old_id, new_id = old[0]["id"], new[0]["id"]

            r = c.patch(f"/events/{new_id}", json={"acknowledged": True, "note": "guard on site", "operator": "ana"})
            assert r.status_code == 200, r.text
            assert r.json()["acknowledged"] and r.json()["reviewed_by"].startswith("ana (key:")
            assert [e["id"] for e in c.get("/events", params={"acknowledged": "true"}).json()["items"]] == [new_id]
            assert c.patch("/events/nope", json={"acknowledged": True}).status_code == 404
            assert c.patch(f"/events/{new_id}", json={"acknowledged": "yes please"}).status_code == 422

            # the sweep (every second) deletes the event that ended 10 days ago, and its snapshot
            assert wait_for(lambda: c.get(f"/events/{old_id}").status_code == 404, timeout=30)
            assert not (snaps / f"{old_id}.jpg").exists() and (snaps / f"{new_id}.jpg").exists()
            kept = c.get(f"/events/{new_id}").json()
            assert kept["acknowledged"] and kept["note"] == "guard on site" and kept["state"] == "ended"
            assert c.get(kept["snapshot"]).status_code == 200
            assert wait_for(lambda: c.get(kept["clip"]).status_code == 200, timeout=20)  # evidence clip
            assert metric(c.get("/metrics").text, "campusguard_retention_deleted_total", kind="events") >= 1
            assert metric(c.get("/metrics").text, "campusguard_event_store_up", backend="postgresql") == 1

            assert wait_for(lambda: len(rx.requests) >= 4)
            time.sleep(0.5)
            assert rx.keys() == [f"{old_id}:started", f"{old_id}:ended", f"{new_id}:started", f"{new_id}:ended"]
        assert cli_main(["db", "current", "--url", pg_url]) == 0
        assert f"{head_revision()} (head)" in capsys.readouterr().out
    finally:
        rx.close()


def test_unreachable_database_at_startup_is_reported_not_fatal(server_factory, tmp_path):
    url = f"postgresql+psycopg://cg:hunter2@127.0.0.1:{free_port()}/campusguard?connect_timeout=2"
    server = server_factory(site_config=site_copy(tmp_path), events_db_url=url, imgsz=320, warmup_iters=0)
    with server.client() as c:
        ready = c.get("/health/ready")
        assert ready.status_code == 200  # detection does not need the event store
        assert ready.json()["event_store"].startswith("unavailable: event store unreachable: OperationalError")
        events = c.get("/events")
        assert events.status_code == 503 and events.json()["error"] == "event_store_unavailable"
        assert metric(c.get("/metrics").text, "campusguard_event_store_up", backend="postgresql") == 0
    log = server.log()
    assert "event store unreachable" in log and "Traceback" not in log and "hunter2" not in log


def test_camera_goes_offline_and_comes_back(server_factory, tmp_path, dataset, pg_url):
    site = yaml.safe_load(site_copy(tmp_path).read_text())
    # 5 s of wall-clock silence: longer than a frame takes on a loaded CI machine
    next(c for c in site["cameras"] if c["id"] == CAMERA)["offline_after_s"] = 5
    path = tmp_path / "site-offline.yaml"
    path.write_text(yaml.safe_dump(site))
    server = server_factory(site_config=path, events_db_url=pg_url, snapshot_dir=tmp_path / "snaps", imgsz=320)
    t0 = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) - dt.timedelta(minutes=5)
    with server.client() as c:
        crowd, _ = pick_frames(c, dataset)
        started = [e for sec in range(0, 12, 2) for e in detect(c, crowd, t0 + dt.timedelta(seconds=sec)).json()["events"]]
        assert [e["state"] for e in started] == ["started"]  # the crowd stands; then the camera goes silent

        def camera() -> dict:
            return next(cam for cam in c.get("/cameras").json() if cam["id"] == CAMERA)

        assert camera()["status"] == "online" and [e["id"] for e in camera()["open_events"]] == [started[0]["id"]]
        assert wait_for(lambda: camera()["status"] == "offline", timeout=30)  # the sweep, not a frame
        assert camera()["open_events"] == []
        assert c.get(f"/events/{started[0]['id']}").json()["ended_at"] == (t0 + dt.timedelta(seconds=10)).isoformat()[:19] + "Z"
        offline = c.get("/events", params={"camera_id": CAMERA, "rule": "camera_offline"}).json()["items"]
        assert len(offline) == 1 and offline[0]["state"] == "started"
        age = metric(c.get("/metrics").text, "campusguard_camera_last_frame_age_seconds", camera_id=CAMERA)
        assert age is not None and age > 5

        back = detect(c, crowd, t0 + dt.timedelta(seconds=60)).json()["events"]
        assert [(e["rule"], e["state"]) for e in back] == [("camera_offline", "ended"), ("camera_online", "ended")]
        assert camera()["status"] == "online"
        assert c.get(f"/events/{offline[0]['id']}").json()["state"] == "ended"
        gate = next(cam for cam in c.get("/cameras").json() if cam["id"] == "gate-cam")
        assert gate["status"] == "never_seen" and gate["last_frame_at"] is None


def test_corrupt_migration_state_stops_startup_and_is_left_alone(server_factory, tmp_path, pg_url):
    from sqlalchemy import text

    from app.rules.store.migrate import upgrade
    from app.rules.store.db import make_engine

    engine = make_engine(pg_url)
    upgrade(engine)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'abc123'"))
    server = server_factory(wait=False, site_config=site_copy(tmp_path), events_db_url=pg_url, imgsz=320)
    server.proc.wait(timeout=120)
    assert server.proc.returncode != 0
    log = server.log()
    assert "'abc123', which this version of CampusGuard does not know" in log and "Nothing was changed" in log
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == "abc123"
    engine.dispose()
