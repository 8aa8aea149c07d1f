"""Retention on SQLite and PostgreSQL: ended events older than the retention go (reviewed ones
too, open ones never) with their snapshots and delivered outbox rows; the snapshot folder is
kept under its disk budget, oldest first; the sweep runs by itself in the service."""

from __future__ import annotations

import datetime as dt
import os
import shutil

from app.config import Settings
from app.core.metrics import Metrics
from app.rules.evidence.files import EvidenceFiles
from app.rules.store.retention import RetentionOptions, RetentionSweeper
from app.rules.service.facade import RulesService
from app.rules.store.db import EventStore
from app.core.timeutil import utcnow
from app.wiring import build_rules
from tests.support.rules_util import EXAMPLE_SITE, outbox_rows
from tests.support.webhooks import sample
from tests.support.wait import wait_for

NOW = utcnow()


def days_ago(d: float) -> dt.datetime:
    return NOW - dt.timedelta(days=d)


def put(store: EventStore, snaps, event_id: str, started: float, ended: float | None, size: int = 1000) -> None:
    store.events.record({"id": event_id, "camera_id": "cam", "zone": "z", "rule": "crowd", "rule_type": "crowd",
                  "started_at": days_ago(started).isoformat(),
                  "ended_at": days_ago(ended).isoformat() if ended is not None else None,
                  "objects": [], "max_count": 1, "snapshot": f"/events/{event_id}/snapshot"},
                 [("http://x/hook", f"{event_id}:started", b"{}")])
    path = snaps / f"{event_id}.jpg"
    path.write_bytes(b"j" * size)
    ts = days_ago(started).timestamp()
    os.utime(path, (ts, ts))


def test_sweep_deletes_by_age_and_keeps_the_budget(db_url, tmp_path):
    snaps = tmp_path / "snaps"
    snaps.mkdir()
    store = EventStore(db_url)
    metrics = Metrics()
    try:
        put(store, snaps, "old", 45, 40)
        put(store, snaps, "oldack", 44, 39)
        store.events.review("oldack", {"acknowledged": True, "note": "seen"}, "alice", NOW)
        put(store, snaps, "openold", 50, None)  # still open: kept, whatever its age
        put(store, snaps, "recent1", 12, 10)
        put(store, snaps, "recent2", 8, 7)
        put(store, snaps, "recent3", 2, 1)
        orphan = snaps / "deadbeef.jpg"  # another replica's sweep deleted its row long ago
        orphan.write_bytes(b"x")
        os.utime(orphan, (days_ago(60).timestamp(),) * 2)
        for key in ("old:started", "recent1:started"):  # delivered rows: old ones go with retention
            row = next(r for r in outbox_rows(store) if r["idempotency_key"] == key)
            store.outbox.delivered(row["id"])

        sweeper = RetentionSweeper(store, EvidenceFiles(snaps), RetentionOptions(retain_days=30, budget_bytes=2500), metrics)
        got = sweeper.sweep()
        assert got == {"events": 2, "snapshots_expired": 4, "snapshots_over_budget": 1, "frames": 0,
                       "audit": 0, "crossings": 0}
        left = {e["id"] for e in store.events.query(limit=500).items}
        assert left == {"openold", "recent1", "recent2", "recent3"}
        # by age: the two deleted events' files, the open event's 50-day-old file, the orphan;
        # budget 2500 B for three 1000 B files: the oldest (recent1) goes and its event forgets it
        assert sorted(p.name for p in snaps.iterdir()) == ["recent2.jpg", "recent3.jpg"]
        assert store.events.get("recent1")["snapshot"] is None and store.events.get("recent2")["snapshot"] is not None
        keys = {r["idempotency_key"] for r in outbox_rows(store)}
        assert "old:started" not in keys and "oldack:started" in keys  # undelivered rows are never dropped
        assert sample(metrics, "campusguard_snapshot_bytes") == 2000
        assert sample(metrics, "campusguard_retention_deleted_total", kind="events") == 2
        assert sample(metrics, "campusguard_retention_deleted_total", kind="snapshots") == 5
        assert sweeper.sweep() == {"events": 0, "snapshots_expired": 0, "snapshots_over_budget": 0, "frames": 0,
                                  "audit": 0, "crossings": 0}
    finally:
        store.close()


def test_the_service_sweeps_by_itself(tmp_path):
    path = tmp_path / "site.yaml"
    shutil.copy(EXAMPLE_SITE, path)
    settings = Settings(site_config=path, events_db_url=f"sqlite:///{tmp_path}/e.db", snapshot_dir=tmp_path / "snaps",
                        events_retain_days=1, retention_sweep_s=0.1)
    svc = build_rules(settings, Metrics())
    (tmp_path / "snaps").mkdir()
    put(svc.store, tmp_path / "snaps", "stale", 3, 2)
    put(svc.store, tmp_path / "snaps", "fresh", 0.5, 0.25)
    svc.start()
    try:
        # the sweep deletes the row, then the file: wait for both
        assert wait_for(lambda: svc.get_event("stale") is None and not (tmp_path / "snaps" / "stale.jpg").exists(),
                        timeout=10)
        assert svc.get_event("fresh") is not None and (tmp_path / "snaps" / "fresh.jpg").exists()
    finally:
        svc.stop()
