"""``FrameFlow`` (app/flow/frame.py) over a real engine with a fake detector: the per-frame
steps in order, each caller's difference as a parameter, the batch's rules in upload order."""

from __future__ import annotations

import asyncio
import datetime as dt
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from app.api.deps import EngineDep, FrameRulesDep, MetricsDep, ShadowDep, get_flow
from app.config import Settings
from app.core.errors import InvalidImage, InvalidTimestamp, QueueFull, ServiceError
from app.core.metrics import Metrics
from app.core.types import Detection
from app.flow.frame import NO_CAMERA, Admitted, FrameFlow, LiveFlow
from app.flow.models import ModelRouter
from app.inference.modelset import ModelSet, ServedModel
from app.inference.pipeline import DetectParams
from app.inference.shadow.lane import NoShadow
from app.rules.port import NoRules
from tests.support.fakes import IMAGE, FakeDetector, make_engine
from tests.support.inprocess import IMGSZ, inprocess_app, png

PARAMS = DetectParams(conf=0.25, iou=0.45, max_det=100)
AT = dt.datetime(2026, 3, 1, 12, 0, tzinfo=dt.timezone.utc)


def jpeg(width: int = 40, height: int = 24) -> bytes:
    ok, buf = cv2.imencode(".jpg", np.full((height, width, 3), 100, np.uint8))
    assert ok
    return buf.tobytes()


class Steps:
    """What happened, in order, across the fake rules and shadow lane."""

    def __init__(self) -> None:
        self.log: list[tuple] = []


class RecordingRules:
    """``FrameRules`` that accepts any capture time (or refuses one) and records each evaluation."""

    def __init__(self, steps: Steps, enabled: bool = True, refuse: bool = False) -> None:
        self.steps, self.enabled, self.refuse = steps, enabled, refuse

    def accept_capture_time(self, camera_id: str, timestamp: dt.datetime | None) -> dt.datetime | None:
        self.steps.log.append(("capture_time", camera_id, timestamp))
        if self.refuse:
            raise InvalidTimestamp("too far in the future", reason="future")
        return timestamp or AT

    def evaluate(self, camera_id: str, timestamp: dt.datetime | None, frame_size: tuple[int, int],
                 detections: list[Detection], frame_rgb: np.ndarray | None = None) -> list[dict[str, Any]]:
        self.steps.log.append(("evaluate", camera_id, timestamp, frame_size, len(detections),
                               None if frame_rgb is None else frame_rgb.shape, threading.current_thread().name))
        return [{"zone": "z", "rule": "r", "state": "started", "frame": frame_size}]

    def zones_for(self, camera_id: str) -> Sequence:
        return ()


class RecordingShadow:
    def __init__(self, steps: Steps) -> None:
        self.steps = steps

    def offer(self, camera_id: str | None, data: bytes | np.ndarray, params: DetectParams,
              detections: Sequence[Detection]) -> bool:
        self.steps.log.append(("offer", camera_id, data, len(detections)))
        return True


@pytest.fixture
def engine():
    engine = make_engine(FakeDetector())
    yield engine
    engine.begin_drain()
    engine.stop()


def counted(metrics: Metrics) -> str:
    return metrics.render().decode()


def test_admit_checks_the_capture_time_of_a_camera_and_says_whether_rules_run(engine):
    steps = Steps()
    flow = FrameFlow(engine, RecordingRules(steps), NoShadow(), Metrics())
    assert flow.admit("gate", None) == Admitted("gate", AT, True)
    assert flow.admit(None, AT) is NO_CAMERA  # no camera: nothing to check, no rules
    assert steps.log == [("capture_time", "gate", None)]
    off = FrameFlow(engine, NoRules(), NoShadow(), Metrics())
    assert off.admit("gate", AT) == Admitted("gate", AT, False)  # no site file: the time stands, no rules


def test_a_refused_capture_time_never_reaches_the_engine(engine):
    steps = Steps()
    flow = FrameFlow(engine, RecordingRules(steps, refuse=True), RecordingShadow(steps), Metrics())
    with pytest.raises(InvalidTimestamp):
        flow.admit("gate", AT)
    assert engine.pipeline.counters.images == 0 and [s[0] for s in steps.log] == ["capture_time"]


@pytest.mark.parametrize("draw, rules_on, keep", [(True, True, "full"), (True, False, "full"),
                                                   (False, True, "evidence"), (False, False, "none")])
def test_keep_is_what_the_caller_needs_back(draw, rules_on, keep):
    assert Admitted("gate", AT, rules_on).keep(draw=draw) == keep
    assert NO_CAMERA.keep() == "none"


def test_one_frame_detect_then_offer_then_rules_on_the_engines_executor_then_metrics(engine):
    steps, metrics = Steps(), Metrics()
    flow = FrameFlow(engine, RecordingRules(steps), RecordingShadow(steps), metrics)
    data = jpeg()
    admitted = flow.admit("gate", None)
    outcome = asyncio.run(flow.run(admitted, data, PARAMS, admitted.keep()))
    assert len(outcome.result.detections) == 1 and outcome.result.image is not None  # evidence kept for the rules
    assert outcome.events == [{"zone": "z", "rule": "r", "state": "started", "frame": (40, 24)}]
    offer, evaluate = steps.log[1:]
    assert offer == ("offer", "gate", data, 1)  # the same bytes the engine got, after its answer
    assert evaluate[:6] == ("evaluate", "gate", AT, (40, 24), 1, (24, 40, 3))
    assert evaluate[6].startswith("campusguard-prep")  # the engine's executor, not the event loop
    text = counted(metrics)
    assert 'campusguard_camera_detections_total{camera_id="gate",class_name="person"} 1.0' in text
    assert 'campusguard_detections_total{class_name="person"} 1.0' in text


def test_an_array_frame_reaches_the_engine_and_the_shadow_as_is_and_is_the_kept_image(engine):
    steps = Steps()
    flow = FrameFlow(engine, RecordingRules(steps), RecordingShadow(steps), Metrics())
    rgb = IMAGE.copy()
    admitted = flow.admit("gate", AT)
    outcome = asyncio.run(flow.run(admitted, rgb, PARAMS, admitted.keep()))
    assert outcome.result.image is rgb  # a decoded frame is kept as it came
    assert steps.log[1][2] is rgb  # the shadow lane gets the very array, no copy


def test_without_a_camera_or_rules_nothing_is_evaluated_and_only_the_class_is_counted(engine):
    steps, metrics = Steps(), Metrics()
    flow = FrameFlow(engine, RecordingRules(steps), RecordingShadow(steps), metrics)
    outcome = asyncio.run(flow.run(NO_CAMERA, jpeg(), PARAMS, NO_CAMERA.keep()))
    assert outcome.events == [] and outcome.result.image is None
    assert [s[:2] for s in steps.log] == [("offer", None)]
    text = counted(metrics)
    assert 'campusguard_detections_total{class_name="person"} 1.0' in text
    assert "campusguard_camera_detections_total{" not in text
    rules_off = FrameFlow(engine, NoRules(), RecordingShadow(steps), metrics)
    admitted = rules_off.admit("gate", AT)
    assert asyncio.run(rules_off.run(admitted, jpeg(), PARAMS, admitted.keep())).events == []
    assert 'campusguard_camera_detections_total{camera_id="gate",class_name="person"} 1.0' in counted(metrics)


def test_a_failed_frame_is_neither_offered_evaluated_nor_counted(engine):
    steps, metrics = Steps(), Metrics()
    flow = FrameFlow(engine, RecordingRules(steps), RecordingShadow(steps), metrics)
    admitted = flow.admit("gate", AT)
    with pytest.raises(InvalidImage):
        asyncio.run(flow.run(admitted, b"not an image", PARAMS, admitted.keep()))
    assert [s[0] for s in steps.log] == ["capture_time"]
    assert 'campusguard_detections_total{class_name="person"}' not in counted(metrics)


def test_a_batch_feeds_the_rules_in_upload_order_and_keeps_each_failure_in_its_place(engine):
    steps = Steps()
    flow = FrameFlow(engine, RecordingRules(steps), RecordingShadow(steps), Metrics())
    images = [jpeg(40, 24), b"corrupt", jpeg(48, 32), jpeg(64, 40)]
    admitted = flow.admit("gate", AT)
    outcomes = asyncio.run(flow.run_batch(admitted, images, PARAMS, admitted.keep()))
    assert isinstance(outcomes[1], InvalidImage)
    answered = [o.events[0]["frame"] for o in outcomes if not isinstance(o, BaseException)]
    assert answered == [(40, 24), (48, 32), (64, 40)]
    assert [s[3] for s in steps.log if s[0] == "evaluate"] == [(40, 24), (48, 32), (64, 40)]  # upload order
    assert [s[2] for s in steps.log if s[0] == "offer"] == [images[0], images[2], images[3]]


def test_a_batch_where_every_image_met_a_503_raises_it_for_the_client_to_retry(engine):
    steps = Steps()
    flow = FrameFlow(engine, RecordingRules(steps), RecordingShadow(steps), Metrics())
    admitted = flow.admit("gate", AT)
    engine.begin_drain()
    with pytest.raises(ServiceError) as info:
        asyncio.run(flow.run_batch(admitted, [jpeg(), jpeg()], PARAMS, admitted.keep()))
    assert info.value.status == 503 and info.value.code == "shutting_down"
    assert [s[0] for s in steps.log] == ["capture_time"]


def test_a_batch_with_one_503_among_answers_keeps_going(engine):
    steps = Steps()
    flow = FrameFlow(engine, RecordingRules(steps), RecordingShadow(steps), Metrics())
    real = engine.detect

    async def busy_second(data, params, keep_image=False):
        if data == b"second":
            raise QueueFull("the queue is full")
        return await real(data, params, keep_image)

    engine.detect = busy_second
    outcomes = asyncio.run(flow.run_batch(NO_CAMERA, [jpeg(), b"second"], PARAMS, "none"))
    assert not isinstance(outcomes[0], BaseException) and isinstance(outcomes[1], QueueFull)


def test_live_flow_waits_for_the_engine_and_follows_the_shadow_lane(engine):
    steps = Steps()
    current: dict[str, Any] = {"shadow": NoShadow()}
    models = ModelRouter(ModelSet([ServedModel("coco", Path("a.pt")), ServedModel("campus", Path("b.pt"))]),
                         {"gate-1": "campus", "plaza": "coco"})
    live = LiveFlow(models, RecordingRules(steps), lambda: current["shadow"], Metrics())
    assert live() is None and live("plaza") is None  # the model is still loading
    models.models.get("coco").slot.put(engine)
    assert live().engine is engine and isinstance(live().shadow, NoShadow) and live("plaza").model == "coco"
    assert live("gate-1") is None  # its camera's model, campus, is still loading
    current["shadow"] = RecordingShadow(steps)
    assert live().shadow is current["shadow"]  # the lane replaces NoShadow once its reference is loaded
    other = make_engine(FakeDetector())
    try:
        models.models.get("campus").slot.put(other)
        flow = live("gate-1")
        assert flow.engine is other and flow.model == "campus"
        assert isinstance(flow.shadow, NoShadow)  # the reference is the default model's: never offered another's
    finally:
        other.stop()


def test_live_flow_holds_its_engine_for_the_frame(engine):
    """The ingest's flow leases its engine for one frame (a swap frees it only after), and
    gives the lease back when the frame fails too."""
    models = ModelRouter(ModelSet([ServedModel("coco", Path("a.pt"))]))
    live = LiveFlow(models, RecordingRules(Steps()), NoShadow, Metrics())
    with live.held("plaza") as flow:
        assert flow is None  # still loading: nothing to hold
    models.models.get("coco").slot.put(engine)
    with live.held("plaza") as flow:
        assert flow is not None and flow.engine is engine and engine.leases.held == 1
    assert engine.leases.held == 0
    with pytest.raises(RuntimeError), live.held() as flow:
        raise RuntimeError("the frame failed")
    assert engine.leases.held == 0


def test_every_detection_route_sends_its_frames_through_the_flow_with_its_own_parameters():
    """The production app in-process: /detect (JSON and annotated), /detect/batch and the
    DeepStack route each admit then run through the FrameFlow the dependency hands them."""
    calls: list[tuple] = []

    class Watched(FrameFlow):
        def admit(self, camera_id, timestamp):
            calls.append(("admit", camera_id))
            return FrameFlow.admit(self, camera_id, timestamp)

        async def run(self, frame, image, params, keep):
            calls.append(("run", frame.camera_id, keep, type(image).__name__))
            return await FrameFlow.run(self, frame, image, params, keep)

        async def run_batch(self, frame, images, params, keep):
            calls.append(("run_batch", frame.camera_id, keep, len(images)))
            return await FrameFlow.run_batch(self, frame, images, params, keep)

    async def watched(engine: EngineDep, rules: FrameRulesDep, shadow: ShadowDep, metrics: MetricsDep) -> FrameFlow:
        return Watched(engine, rules, shadow, metrics)

    settings = Settings(_env_file=None, imgsz=IMGSZ, threads=1, preprocess_workers=1, warmup_iters=0)
    with inprocess_app(settings) as ip:
        ip.app.dependency_overrides[get_flow] = watched
        c, image = ip.client, png()
        headers = {"Content-Type": "image/png"}
        assert c.post("/detect", params={"camera_id": "gate-1"}, content=image, headers=headers).status_code == 200
        r = c.post("/detect", params={"annotate": "true"}, content=image, headers=headers)
        assert r.status_code == 200 and r.headers["content-type"] == "image/jpeg"
        files = [("images", ("a.png", image, "image/png")), ("images", ("b.png", image, "image/png"))]
        assert c.post("/detect/batch", params={"camera_id": "gate-1"}, files=files).status_code == 200
        assert c.post("/v1/vision/detection", files={"image": ("a.png", image, "image/png")}).json()["success"]
    assert calls == [
        ("admit", "gate-1"), ("run", "gate-1", "none", "bytes"),  # no site file: no rules, nothing kept
        ("admit", None), ("run", None, "full", "bytes"),  # the annotated reply draws on the whole frame
        ("admit", "gate-1"), ("run_batch", "gate-1", "none", 2),
        ("run", None, "none", "bytes"),  # DeepStack: NO_CAMERA, no admit
    ]
