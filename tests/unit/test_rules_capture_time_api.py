"""/detect's capture-time contract and POST /admin/cameras/{id}/reset, in process (fake engine)."""

from __future__ import annotations

import datetime as dt
import shutil
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.api.errors import install_error_handlers
from app.api.routes import admin, cameras, detect, events
from app.api.state import state_of
from app.config import Settings
from app.core.metrics import Metrics
from app.inference.engine import DetectResult
from app.inference.leases import Leases
from app.rules.service.facade import RulesService
from app.wiring import api_options, build_gate, build_rules
from tests.support.fakes import FakeDetector
from tests.support.rules_util import EXAMPLE_SITE, NAMES, H, W, people
from tests.support.state import install_state

TIMINGS = dict.fromkeys(("decode_ms", "queue_wait_ms", "preprocess_ms", "inference_ms", "postprocess_ms",
                         "total_ms"), 0.0)


class FakeEngine:
    """Every image shows three people in the plaza; counts how often it was asked."""

    def __init__(self) -> None:
        self.executor = ThreadPoolExecutor(2)
        self.pipeline = SimpleNamespace(detector=FakeDetector(names=NAMES, provider="cpu"))  # what the routes' MaybeDetectorDep reads
        self.calls = 0
        self.leases = Leases()  # a request leases the engine it reads (app/flow/models.py)

    def check_capacity(self) -> None:
        pass

    async def detect(self, data: bytes, params, keep_image: bool = False) -> DetectResult:
        self.calls += 1
        return DetectResult(people(3), W, H, TIMINGS, np.zeros((H, W, 3), np.uint8) if keep_image else None)


@pytest.fixture
def client(tmp_path):
    path = tmp_path / "site.yaml"
    shutil.copy(EXAMPLE_SITE, path)
    settings = Settings(site_config=path, events_db_url=f"sqlite:///{tmp_path}/e.db", snapshot_dir=tmp_path / "s",
                        api_keys="k1")
    app = FastAPI()
    metrics = Metrics()
    state = install_state(app, options=api_options(settings), metrics=metrics, gate=build_gate(settings, metrics),
                          engine=FakeEngine(), rules=build_rules(settings, metrics))
    install_error_handlers(app)
    app.include_router(detect.router)
    for module in (events, cameras, admin):  # the rules' routes (reset, reload, events)
        app.include_router(module.router)
    with TestClient(app, headers={"X-API-Key": "k1"}) as c:
        yield c
    state.rules.get().stop()
    state.engine.get().executor.shutdown()


def post(client, timestamp=None, camera="plaza-cam"):
    params = {"camera_id": camera}
    if timestamp is not None:
        params["timestamp"] = timestamp
    return client.post("/detect", params=params, content=b"\xff\xd8fake", headers={"Content-Type": "image/jpeg"})


@pytest.mark.parametrize("stamp, code", [
    ("9999-12-31T23:59:59Z", "invalid_timestamp"),
    ("2100-01-01T00:00:00Z", "invalid_timestamp"),
    ("0001-01-01T00:00:00Z", "invalid_timestamp"),
    ("0001-01-01T00:00:00+05:00", "invalid_parameter"),  # not representable in UTC: refused while parsing
    ("99999999999999", "invalid_parameter"),  # Unix numbers are not ISO 8601
    ("0.5", "invalid_parameter"),
])
def test_bad_capture_time_is_422_before_inference_and_the_camera_goes_on(client, stamp, code):
    engine = state_of(client.app).engine.get()
    r = post(client, stamp)
    assert r.status_code == 422 and r.json()["error"] == code, r.text
    assert engine.calls == 0  # refused before the model ran
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    bodies = [post(client, (now + dt.timedelta(seconds=s - 20)).isoformat()) for s in range(11)]
    assert all(b.status_code == 200 for b in bodies)
    assert [e["state"] for b in bodies for e in b.json()["events"]] == ["started"]  # rules evaluated


def test_refusals_are_counted_per_camera(client):
    assert post(client, "2100-01-01T00:00:00Z").status_code == 422
    metrics = state_of(client.app).metrics
    assert metrics.registry.get_sample_value("campusguard_invalid_timestamps_total",
                                             {"camera_id": "plaza-cam", "reason": "future"}) == 1
    # a camera outside the site file is detected, not evaluated: its time is not used, so not refused
    r = post(client, "2100-01-01T00:00:00Z", camera="not-in-site")
    assert r.status_code == 200 and r.json()["events"] == []
    assert metrics.registry.get_sample_value("campusguard_invalid_timestamps_total",
                                             {"camera_id": "not-in-site", "reason": "future"}) is None


def test_reset_route(client):
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0)
    for s in range(11):
        assert post(client, (now + dt.timedelta(seconds=s - 20)).isoformat()).status_code == 200
    r = client.post("/admin/cameras/plaza-cam/reset")
    assert r.status_code == 200 and r.json() == {"ok": True, "camera_id": "plaza-cam", "ended_events": 1}
    assert client.get("/events", params={"camera_id": "plaza-cam"}).json()["items"][0]["state"] == "ended"
    r = client.post("/admin/cameras/nope/reset")
    assert r.status_code == 404 and r.json()["error"] == "unknown_camera"
    assert client.post("/admin/cameras/plaza-cam/reset", headers={"X-API-Key": ""}).status_code == 401


def test_reload_of_a_non_utf8_site_file_is_422(client):
    path = state_of(client.app).rules.get().path
    path.write_bytes(path.read_bytes() + "# Bibliothèque\n".encode("latin-1"))
    r = client.post("/admin/reload")
    assert r.status_code == 422 and r.json()["error"] == "invalid_site_config", r.text
    assert "not UTF-8" in r.json()["detail"][0]
    assert post(client).status_code == 200  # the running config stays
