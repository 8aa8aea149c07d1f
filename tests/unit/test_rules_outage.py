"""The event store going away (a real PostgreSQL that refuses connections): detection and rules
keep answering, events are buffered in memory (bounded) and written once it is back; readiness,
/health and metrics say so; reads answer 503 event_store_unavailable."""

from __future__ import annotations

import shutil
import time
from types import SimpleNamespace

import numpy as np
import psycopg
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient
from sqlalchemy.engine import make_url

from app.api.routes import admin, cameras, events, health
from app.api.errors import install_error_handlers
from app.config import Settings
from app.api.options import ApiOptions
from app.core.metrics import Metrics
from app.api.access import Gate
from app.core.roles import Keyring
from app.rules.store.errors import StoreUnavailable
from app.rules.service.facade import RulesService
from app.wiring import build_rules
from tests.support.net import free_port
from tests.support.rules_util import EXAMPLE_SITE, H, W, Receiver, at, people
from tests.support.state import install_state
from tests.support.wait import wait_for
from tests.support.webhooks import sample


def crowd_event(svc: RulesService, base: float) -> list[dict]:
    """Frames that start and end one crowd event on plaza-cam; the events they return."""
    frame = np.zeros((H, W, 3), np.uint8)
    out = []
    for t in range(0, 11):
        out += svc.evaluate("plaza-cam", at(base + t), (W, H), people(3), frame)
    for t in range(11, 16):
        out += svc.evaluate("plaza-cam", at(base + t), (W, H), [], frame)
    return out


def service(tmp_path, url: str, metrics: Metrics, **settings) -> RulesService:
    path = tmp_path / "site.yaml"
    shutil.copy(EXAMPLE_SITE, path)
    svc = build_rules(Settings(site_config=path, events_db_url=url, snapshot_dir=tmp_path / "snaps",
                                              **settings), metrics)
    svc.writer.retry_s = 0.1
    return svc


def set_connections(postgres, url: str, allowed: bool) -> None:
    """Cut (or restore) a database: refuse new connections and end the open ones."""
    db = make_url(url).database
    with psycopg.connect(postgres.admin_dsn(), autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{db}" ALLOW_CONNECTIONS {str(allowed).lower()}')
        if not allowed:
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (db,))


def app_with(svc: RulesService) -> FastAPI:
    app = FastAPI()
    install_state(app, rules=svc, gate=Gate.of(Keyring()), options=ApiOptions(), metrics=Metrics(),
                  engine=SimpleNamespace(ready=True, pipeline=SimpleNamespace(detector=None)),  # no model: status only
                  started_at=time.time())
    install_error_handlers(app)
    for module in (events, cameras, admin):
        app.include_router(module.router)
    app.include_router(health.router)
    return app


def test_outage_buffers_and_writes_back_once_the_database_answers(tmp_path, postgres, pg_url):
    rx = Receiver()
    metrics = Metrics()
    svc = service(tmp_path, pg_url, metrics, webhook_urls=[rx.url], webhook_secret="outage-webhook-secret")
    svc.start()
    client = TestClient(app_with(svc))
    try:
        first = crowd_event(svc, 0)
        assert [e["state"] for e in first] == ["started", "ended"]
        assert svc.query_events().total == 1 and svc.store_status() == "ok"
        assert client.get("/health/ready").json() == {"status": "ready", "event_store": "ok"}

        set_connections(postgres, pg_url, False)
        during = crowd_event(svc, 100)  # the rules keep answering, nothing raises
        assert [e["state"] for e in during] == ["started", "ended"]
        assert svc.store_status().startswith("unavailable: event store unreachable: OperationalError")
        assert sample(metrics, "campusguard_event_store_up", backend="postgresql") == 0
        assert sample(metrics, "campusguard_event_buffer_depth") == 2
        ready = client.get("/health/ready")
        assert ready.status_code == 200 and ready.json()["event_store"].startswith("unavailable:")
        assert "2 event write(s) buffered" in client.get("/health").json()["event_store"]
        down = client.get("/events")
        assert down.status_code == 503 and down.json()["error"] == "event_store_unavailable"
        assert "Traceback" not in down.text
        with pytest.raises(StoreUnavailable):
            svc.get_event(during[0]["id"])

        set_connections(postgres, pg_url, True)
        assert wait_for(lambda: svc.store_status() == "ok", timeout=20)
        assert sample(metrics, "campusguard_event_store_up", backend="postgresql") == 1
        assert sample(metrics, "campusguard_event_buffer_depth") == 0
        stored = svc.get_event(during[0]["id"])
        assert stored["state"] == "ended" and stored["ended_at"] == during[1]["ended_at"]
        assert svc.query_events().total == 2
        # every start and end reaches the webhook exactly once, in order
        keys = [f"{e['id']}:{e['state']}" for e in first + during]
        assert wait_for(lambda: len(rx.requests) >= 4, timeout=20)
        time.sleep(0.3)
        assert rx.keys() == keys
    finally:
        set_connections(postgres, pg_url, True)
        svc.stop()
        rx.close()


def test_unreachable_at_startup_then_bounded_buffer(tmp_path, caplog):
    url = f"postgresql+psycopg://cg:secret@127.0.0.1:{free_port()}/events?connect_timeout=2"
    metrics = Metrics()
    svc = service(tmp_path, url, metrics, events_buffer_size=3)  # no exception: detection must start
    try:
        message = svc.store_status()
        assert message.startswith("unavailable: event store unreachable: OperationalError") and "secret" not in message
        assert "Traceback" not in caplog.text and "buffered in memory" in caplog.text
        for k in range(3):
            assert len(crowd_event(svc, k * 100)) == 2  # 6 writes into a buffer of 3
        assert svc.writer.buffered == 3
        assert sample(metrics, "campusguard_event_buffer_dropped_total") == 3
        assert sample(metrics, "campusguard_event_store_up", backend="postgresql") == 0
    finally:
        svc.stop()
