"""A removed replica's open events (app/rules/service/orphans.py), on SQLite and on a real
PostgreSQL: a live replica ends them once the gone one has been silent for
FLEET_ORPHAN_AFTER_S, at the camera's last frame there, with their webhook ends; when two live
replicas sweep at once only one ends each event; a late write of the gone replica never
reopens one; camera health events are left alone."""

from __future__ import annotations

import datetime as dt
import threading

import pytest
import yaml

from app.config import Settings
from app.core.metrics import Metrics
from app.core.timeutil import utcnow
from app.wiring import build_rules
from tests.support.rules_util import H, W, at, det, outbox_rows

CAM = "gate-cam"
SITE = {"cameras": [{"id": CAM, "zones": [{"name": "gate", "polygon": [[0, 0], [1, 0], [1, 1], [0, 1]],
                                            "rules": [{"type": "intrusion", "name": "no-entry", "classes": ["person"]}]}]},
                    {"id": "other-cam", "zones": []}]}


@pytest.fixture
def replicas(tmp_path, db_url):
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(SITE))
    made = []

    def make(name: str):
        svc = build_rules(Settings(_env_file=None, site_config=tmp_path / "site.yaml", events_db_url=db_url,
                                   snapshot_dir=tmp_path / f"snaps-{name}", clips=False, replica_id=name,
                                   fleet_orphan_after_s=60, webhook_urls=["http://127.0.0.1:9/hook"],
                                   webhook_secret="orphans-test-secret"), Metrics())
        made.append(svc)
        return svc

    yield make
    for svc in made:
        svc.writer.stop()
        svc.store.close()
        svc.shards.stop()


def open_intrusion(svc) -> str:
    """A person in the zone for 5 frames: one open intrusion, stored, and the replica's batch written."""
    got = [e for t in range(5) for e in svc.evaluate(CAM, at(t), (W, H), [det("person", 0.5, 0.5)])]
    assert [e["state"] for e in got] == ["started"]
    svc.writer.settle()
    return got[0]["id"]


def opened_by(svc, event_id: str) -> str | None:
    from sqlalchemy import select

    from app.rules.store.schema import events_table

    with svc.store.engine.connect() as conn:
        return conn.execute(select(events_table.c.replica).where(events_table.c.id == event_id)).scalar_one()


def ends_in_outbox(svc, event_id: str) -> int:
    return sum(1 for r in outbox_rows(svc.store) if r["idempotency_key"] == f"{event_id}:ended")


def test_a_live_replica_ends_the_open_events_of_a_gone_one(replicas):
    gone, live = replicas("r-gone"), replicas("r-live")
    now = utcnow()
    event_id = open_intrusion(gone)
    gone.fleet.writer.tick(now)  # its last heartbeat; then the pod is removed
    assert opened_by(live, event_id) == "r-gone"
    sweeper = live.fleet.writer.sweeper
    assert sweeper.sweep(now + dt.timedelta(seconds=59)) == 0  # silent, but not for FLEET_ORPHAN_AFTER_S yet
    assert live.store.events.get(event_id)["state"] == "started"
    assert sweeper.sweep(now + dt.timedelta(seconds=61)) == 1
    live.writer.settle()
    stored = live.store.events.get(event_id)
    assert stored["state"] == "ended" and stored["ended_at"] == "2026-03-02T12:00:04Z"  # its last frame there
    assert ends_in_outbox(live, event_id) == 1  # the webhook hears the end once
    assert live.store.fleet.states()[CAM]["open_events"] == []  # the gone replica's row shows none open
    assert sweeper.sweep(now + dt.timedelta(seconds=200)) == 0  # nothing left
    # the gone replica was only slow, and writes the open event again: it stays ended
    gone.store.events.record({**stored, "ended_at": None})
    assert live.store.events.get(event_id)["ended_at"] == "2026-03-02T12:00:04Z"


def test_a_moved_camera_ends_at_the_gone_replicas_last_heartbeat_and_the_live_ones_events_stay(replicas):
    gone, live = replicas("r-gone"), replicas("r-live")
    now = utcnow()
    old = open_intrusion(gone)
    gone.fleet.writer.tick(now)
    # the camera's frames now reach the live replica, which opens its own event and owns the row
    fresh = [e for t in range(10, 12) for e in live.evaluate(CAM, at(t), (W, H), [det("person", 0.5, 0.5)])]
    live.writer.settle()
    live.fleet.writer.tick(now + dt.timedelta(seconds=61))  # its heartbeat, its row; the sweep runs in the tick
    live.writer.settle()
    ended_at = dt.datetime.fromisoformat(live.store.events.get(old)["ended_at"].replace("Z", "+00:00"))
    assert abs((ended_at - now).total_seconds()) < 0.01  # the camera left it: its last heartbeat
    assert live.store.events.get(fresh[0]["id"])["state"] == "started"  # its own event is not touched
    assert live.store.fleet.states()[CAM]["owner"] == "r-live"


def test_two_live_replicas_sweeping_at_once_end_each_event_once(replicas):
    gone, a, b = replicas("r-gone"), replicas("r-a"), replicas("r-b")
    now = utcnow()
    event_id = open_intrusion(gone)
    gone.fleet.writer.tick(now)
    later = now + dt.timedelta(seconds=90)
    counts: list[int] = []
    start = threading.Barrier(2)

    def sweep(svc) -> None:
        start.wait()
        counts.append(svc.fleet.writer.sweeper.sweep(later))

    threads = [threading.Thread(target=sweep, args=(svc,)) for svc in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    a.writer.settle()
    b.writer.settle()
    assert sorted(counts) == [0, 1]
    assert ends_in_outbox(a, event_id) == 1


def test_camera_health_events_of_a_gone_replica_are_left_alone(replicas):
    gone, live = replicas("r-gone"), replicas("r-live")
    now = utcnow()
    offline = {"id": "f" * 32, "camera_id": "other-cam", "zone": "", "rule": "camera_offline",
               "rule_type": "camera_offline", "started_at": "2026-03-02T12:00:00Z", "ended_at": None, "objects": [],
               "max_count": 0, "snapshot": None, "clip": None}
    gone.store.events.record(offline)
    gone.fleet.writer.tick(now)
    assert live.fleet.writer.sweeper.sweep(now + dt.timedelta(seconds=300)) == 0
    assert live.store.events.get("f" * 32)["state"] == "started"
