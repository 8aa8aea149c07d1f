"""The production app in-process with a shadow lane: fake or real models, no socket.

``fake_lane`` puts a ShadowLane over a fake reference beside the fake-detector engine of
``inprocess_app`` (mechanics: sampling, drops, routes, roles). ``real_shadow_app`` builds the
engine and the lane from Settings through app/wiring exactly as the lifespan does (real
model, real reference), with the lane's options replaceable (tests sample every frame).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from app import wiring
from app.api.deps import get_engine
from app.api.state import state_of
from app.config import Settings
from app.inference.pipeline import DecodePolicy, Pipeline
from app.inference.shadow.book import AgreementBook
from app.inference.shadow.lane import ShadowLane, ShadowOptions
from app.inference.shadow.worst import WorstFrames
from app.main import create_app
from fastapi.testclient import TestClient
from tests.support.inprocess import InProcess, scene_detector

EVERY_FRAME = ShadowOptions(sample=1.0, min_interval_s=0.0, queue_size=64)


def fake_lane(env: InProcess, options: ShadowOptions = EVERY_FRAME, reference=None,
              idle: Callable[[], bool] | None = None) -> ShadowLane:
    """A started lane over ``reference`` (default: the same fake model, so agreement is 1),
    installed as the app's shadow."""
    engine = env.engine
    lane = ShadowLane(Pipeline(reference or scene_detector(), 0, decode=DecodePolicy(reduce=False)), options,
                      AgreementBook(900.0), WorstFrames(5, 10, 900.0),
                      idle=idle or (lambda: engine.idle), label=state_of(env.app).metrics.camera_label,
                      describe={"backend": "fake"})
    lane.start()
    state_of(env.app).shadow.put(lane)
    return lane


@contextmanager
def real_shadow_app(settings: Settings, options: ShadowOptions = EVERY_FRAME) -> Iterator[InProcess]:
    app = create_app(settings)
    metrics = state_of(app).metrics
    engine = wiring.build_engine(settings, wiring.build_pipeline(settings), metrics)
    engine.start()
    engine.mark_ready()
    built = wiring.build_shadow(settings, engine, metrics)
    assert isinstance(built, ShadowLane), "the settings must turn the shadow on"
    lane = ShadowLane(built.reference, options, built.book, built.worst, idle=lambda: engine.idle,
                      label=metrics.camera_label, describe=built.describe)
    lane.start()
    state_of(app).shadow.put(lane)
    app.dependency_overrides[get_engine] = lambda: engine
    try:
        yield InProcess(app, TestClient(app, raise_server_exceptions=False), engine)
    finally:
        engine.begin_drain()
        engine.stop()
        lane.stop()
