"""The real app in-process with a fake detector: contract tests without a model or a server.

``inprocess_app`` builds the app with ``create_app`` (the production routes, middleware
and error handlers), then hands the routes a real ``InferenceEngine`` over the fake detector ``scene_detector``
through ``app.dependency_overrides`` (and a rules service, when given). The lifespan is not
run, so no model loads; ``TestClient`` talks ASGI directly, no socket.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.api.deps import get_engine, get_rules
from app.api.state import state_of
from app.config import Settings
from app.core.metrics import Metrics
from app.inference.engine import InferenceEngine
from app.main import create_app
from app.inference.pipeline import Pipeline
from app.wiring import build_engine
from tests.support.fakes import FakeDetector

IMGSZ = 64


def wait_until_ready(client: TestClient, timeout_s: float, poll_s: float = 0.2) -> None:
    """Poll ``/health/ready`` of an app that ``TestClient`` started (its model loads in the
    background) until it answers 200; past ``timeout_s``, fail with what ``/health`` says."""
    deadline = time.monotonic() + timeout_s
    while client.get("/health/ready").status_code != 200:
        assert time.monotonic() < deadline, client.get("/health").json()
        time.sleep(poll_s)


# The in-process app's model: one person box in the lower middle of every frame (foot point at
# 0.5, 0.75 of the model input) and one car box at the top; no model, no device.
SCENE: dict[str, Any] = {
    "imgsz": IMGSZ, "names": {0: "person", 1: "car", 2: "dog"}, "anchors": 8, "provider": "fake-cpu",
    "boxes": (((32.0, 40.0, 8.0, 16.0), 0, 0.9), ((32.0, 8.0, 16.0, 8.0), 1, 0.5)),
}


def scene_detector() -> FakeDetector:
    """The fake detector of the in-process app (``SCENE``)."""
    return FakeDetector(**SCENE)


def png(width: int = 64, height: int = 48, grey: int = 90) -> bytes:
    ok, buf = cv2.imencode(".png", np.full((height, width, 3), grey, np.uint8))
    assert ok
    return buf.tobytes()


@dataclass
class InProcess:
    app: FastAPI
    client: TestClient
    engine: InferenceEngine | None


@contextmanager
def inprocess_app(settings: Settings | None = None, *, ready: bool = True, rules=None,
                  rules_factory: Callable[[Metrics], Any] | None = None) -> Iterator[InProcess]:
    """The production app with a fake-detector engine (``ready=False``: no engine, as while
    loading) and, optionally, a rules service (with the audit trail in its event store, as the
    lifespan builds it; its records are written when GET /audit reads). ``rules_factory`` builds
    it on the app's own metrics, so /metrics shows the rules' series as in production."""
    settings = settings or Settings(backend="torch", precision="fp32", imgsz=IMGSZ, threads=1, preprocess_workers=1, warmup_iters=0)
    app = create_app(settings)
    state = state_of(app)
    if rules_factory is not None:
        rules = rules_factory(state.metrics)
    engine = None
    if ready:
        pipeline = Pipeline(scene_detector(), 0, settings.max_pixels)
        engine = build_engine(settings, pipeline, state.metrics)
        engine.start()
        engine.mark_ready()
        app.dependency_overrides[get_engine] = lambda: engine
    if rules is not None:
        app.dependency_overrides[get_rules] = lambda: rules
        if rules.enabled:  # the trail in its event store, as the lifespan's rules stack builds it
            from app.wiring.rules_service import audit_trail

            state.gate.audit.put(audit_trail(rules.store.audit, lambda: rules.writer.up, state.metrics))
    try:
        yield InProcess(app, TestClient(app, raise_server_exceptions=False), engine)
    finally:
        if engine is not None:
            engine.begin_drain()
            engine.stop()
