"""Alembic migrations of the event store on SQLite and a real PostgreSQL: from empty to head,
adopting a database built by the old create_all, several replicas migrating at once, a
corrupt version table reported and left alone, an unreachable database reported in one line."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import (JSON, Column, DateTime, Index, Integer, MetaData, String, Table, Text, UniqueConstraint,
                        inspect, text)

from app.rules.store.migrate import MigrationError, current_revision, head_revision, upgrade
from app.rules.store.errors import StoreUnavailable
from app.rules.store.db import EventStore, make_engine
from app.rules.store.schema import metadata
from tests.conftest import REPO
from tests.support.net import free_port


def pre_alembic_metadata() -> MetaData:
    """The two tables exactly as `metadata.create_all` made them before migrations existed."""
    md = MetaData()
    Table("campusguard_events", md,
          Column("id", String(64), primary_key=True), Column("camera_id", String(128), nullable=False),
          Column("zone", String(128), nullable=False), Column("rule", String(128), nullable=False),
          Column("rule_type", String(32), nullable=False),
          Column("started_at", DateTime(timezone=True), nullable=False),
          Column("ended_at", DateTime(timezone=True)), Column("objects", JSON, nullable=False),
          Column("max_count", Integer, nullable=False), Column("snapshot", String(512)),
          Index("ix_campusguard_events_started", "started_at"),
          Index("ix_campusguard_events_camera", "camera_id", "started_at"))
    Table("campusguard_outbox", md,
          Column("id", Integer, primary_key=True, autoincrement=True), Column("event_id", String(64), nullable=False),
          Column("url", String(2048), nullable=False), Column("idempotency_key", String(128), nullable=False),
          Column("payload", Text, nullable=False), Column("attempts", Integer, nullable=False),
          Column("next_attempt_at", DateTime(timezone=True), nullable=False),
          Column("created_at", DateTime(timezone=True), nullable=False),
          Column("delivered_at", DateTime(timezone=True)), Column("last_error", Text),
          UniqueConstraint("url", "idempotency_key", name="uq_campusguard_outbox_key"),
          Index("ix_campusguard_outbox_pending", "delivered_at", "url", "id"))
    return md


def schema(engine) -> dict:
    insp = inspect(engine)
    return {t: sorted(c["name"] for c in insp.get_columns(t)) for t in metadata.tables}


def test_from_empty_to_head_matches_the_models(db_url):
    engine = make_engine(db_url)
    assert current_revision(engine) is None
    assert upgrade(engine) == (None, head_revision())
    assert current_revision(engine) == head_revision()
    assert schema(engine) == {t.name: sorted(c.name for c in t.columns) for t in metadata.tables.values()}
    indexes = {i["name"] for i in inspect(engine).get_indexes("campusguard_events")}
    assert {"ix_campusguard_events_order", "ix_campusguard_events_camera_order", "ix_campusguard_events_acknowledged"} <= indexes
    assert "ix_campusguard_events_started" not in indexes  # superseded in 0006
    with engine.connect() as conn:  # the migrations build what the models describe (autogenerate sees no diff)
        assert compare_metadata(MigrationContext.configure(conn), metadata) == []
    assert upgrade(engine) == (head_revision(), head_revision())  # idempotent
    engine.dispose()


def test_database_from_before_migrations_is_stamped_and_keeps_its_rows(db_url):
    engine = make_engine(db_url)
    pre_alembic_metadata().create_all(engine)
    with engine.begin() as conn:
        conn.execute(text("INSERT INTO campusguard_events (id, camera_id, zone, rule, rule_type, started_at, objects,"
                          " max_count) VALUES ('old1', 'cam', 'z', 'crowd', 'crowd', '2026-01-01 10:00:00', '[]', 2)"))
    engine.dispose()
    store = EventStore(db_url)  # migrates: stamp 0001, then upgrade
    try:
        assert current_revision(store.engine) == head_revision()
        old = store.events.get("old1")
        assert old["camera_id"] == "cam" and old["max_count"] == 2 and old["started_at"] == "2026-01-01T10:00:00Z"
        assert old["acknowledged"] is False and old["false_positive"] is False and old["reviewed_by"] is None
    finally:
        store.close()


def test_unknown_revision_is_reported_and_left_alone(db_url):
    engine = make_engine(db_url)
    upgrade(engine)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = 'ffff9999'"))
    with pytest.raises(MigrationError, match="ffff9999.*does not know.*Nothing was changed"):
        upgrade(engine)
    with engine.connect() as conn:
        assert conn.execute(text("SELECT version_num FROM alembic_version")).scalar_one() == "ffff9999"
    engine.dispose()


def test_unreachable_database_is_one_clear_line():
    engine = make_engine(f"postgresql+psycopg://u:secret@127.0.0.1:{free_port()}/nope?connect_timeout=2")
    with pytest.raises(StoreUnavailable) as info:
        upgrade(engine)
    msg = info.value.message
    assert msg.startswith("event store unreachable: OperationalError:") and "\n" not in msg
    assert "secret" not in msg


def test_replicas_migrating_at_once_serialise(pg_url):
    """Four processes start on an empty PostgreSQL database together: one migrates, all succeed."""
    code = ("import sys; from app.rules.store.db import make_engine; from app.rules.store.migrate import upgrade; "
            "print(upgrade(make_engine(sys.argv[1])))")
    procs = [subprocess.Popen([sys.executable, "-c", code, pg_url], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(4)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1][-2000:] for o in outs]
    results = [o[0].strip() for o in outs]
    head = head_revision()
    assert results.count(f"(None, '{head}')") == 1 and results.count(f"('{head}', '{head}')") == 3


def test_sqlite_threads_migrating_at_once(tmp_path):
    url = f"sqlite:///{tmp_path}/e.db"
    results, errors = [], []

    def go():
        try:
            engine = make_engine(url)
            results.append(upgrade(engine))
            engine.dispose()
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=go) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    head = head_revision()
    assert not errors and sorted(results, key=str) == [(head, head), (head, head), (None, head)]


def test_db_command_upgrade_and_current(db_url, capsys):
    from app.cli import main

    assert main(["db", "current", "--url", db_url]) == 0
    assert "empty (never migrated) (pending" in capsys.readouterr().out
    assert main(["db", "upgrade", "--url", db_url]) == 0
    assert f"empty -> {head_revision()}" in capsys.readouterr().out
    assert main(["db", "current", "--url", db_url]) == 0
    out = capsys.readouterr().out
    assert f": {head_revision()} (head)" in out
    assert main(["db", "current", "--url", "nosuchdriver://x"]) == 2
    assert "invalid CAMPUSGUARD_EVENTS_DB_URL" in capsys.readouterr().err
