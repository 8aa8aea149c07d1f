"""Rollout behind the shadow reference (issue 41 part 4): the state machine over fake engines,
a fake clock and scores fed straight into the rollout's book; the comparator over fake engines;
the routes in process. The real frames and the real model: tests/unit/test_rollout_e2e.py."""

from __future__ import annotations

import asyncio
import math
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.api.access import Gate
from app.api.errors import install_error_handlers
from app.api.routes import detect, models, rollout
from app.config import Settings
from app.core.audit import AuditEntry
from app.core.errors import InferenceFailed, InvalidImage, QueueFull
from app.core.metrics import Metrics
from app.core.roles import Keyring
from app.flow.frame import LiveFlow
from app.flow.models import ModelRouter
from app.flow.modelswap import ModelConflict, ModelSwitch
from app.flow.rollout import RolloutController, candidate_lane
from app.flow.rollout_state import (
    GateDatasetRequired,
    InvalidRollout,
    NoRollout,
    RolloutInProgress,
    RolloutPhaseConflict,
    RolloutSettings,
    judge,
)
from app.flow.tap import NO_TAP
from app.inference.engine import InferenceEngine
from app.inference.modelset import ModelSet, ServedModel, UnknownModel
from app.inference.pipeline import DetectParams
from app.inference.shadow.book import FrameScore
from app.inference.shadow.candidate import CandidateBook, CandidateLane, CandidateOptions, Window, failure
from app.inference.shadow.lane import NoShadow
from app.rules.port import NoRules
from app.wiring import model_admin as wiring_admin
from tests.support.fakes import IMAGE, FakeDetector, make_engine
from tests.support.inprocess import png
from tests.support.models import write_onnx_names
from tests.support.state import install_state

COCO = {0: "person", 1: "car"}
CAMPUS = {0: "student", 1: "vehicle"}
CAMERAS = {"a": "coco", "b": "coco", "c": "coco", "d": "coco", "gate": "campus"}
SAME = FrameScore(primary=2, reference=2, matched=2, conf_delta=0.0)
HALF = FrameScore(primary=1, reference=3, matched=1, conf_delta=0.0)  # agreement 0.5


class Clock:
    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


class Runtime(wiring_admin.RuntimeModels):
    """The real loader's checks over fake engines (a weights file's classes name the fake's)."""

    def __init__(self, settings: Settings, state, metrics: Metrics) -> None:
        super().__init__(settings, None, state, metrics)
        self.built: list[InferenceEngine] = []
        self.freed: list[InferenceEngine] = []

    def build(self, name: str, path: Path) -> InferenceEngine:
        engine = make_engine(FakeDetector(names=self.classes_of(path)))
        self.built.append(engine)
        return engine

    def free(self, engine: InferenceEngine) -> None:
        self.freed.append(engine)
        super().free(engine)


class Seen:
    """A tap that keeps what the frame flow told it."""

    def __init__(self) -> None:
        self.answered_by: list[str | None] = []

    def answered(self, camera_id, data, params, keep, result) -> None:
        self.answered_by.append(camera_id)

    def failed(self, camera_id, exc) -> None:
        pass


class StillLane:
    """The comparator with no worker: the test writes the book."""

    def __init__(self, book: CandidateBook) -> None:
        self.book, self.taps, self.stopped = book, {"current": Seen(), "candidate": Seen()}, False

    def start(self) -> None:
        pass

    def stop(self) -> None:
        self.stopped = True


def feed(book: CandidateBook, n: int, frame: FrameScore | None = SAME, candidate_ms: float = 10.0,
         current_ms: float = 10.0, candidate_errors: int = 0) -> None:
    for i in range(n):
        book.ran("current", current_ms)
        book.ran("candidate", None if i < candidate_errors else candidate_ms)
        book.compared(frame)


@pytest.fixture()
def env(tmp_path: Path):
    folder = tmp_path / "models"
    folder.mkdir()
    for name, classes in (("coco.onnx", COCO), ("coco-v2.onnx", COCO), ("campus.onnx", CAMPUS)):
        write_onnx_names(folder / name, classes)
    first = make_engine(FakeDetector(names=COCO))
    router = ModelRouter(ModelSet([ServedModel("coco", folder / "coco.onnx", classes=COCO),
                                   ServedModel("campus", folder / "campus.onnx", classes=CAMPUS)]), CAMERAS)
    app = FastAPI()
    install_error_handlers(app)
    for module in (detect, models, rollout):
        app.include_router(module.router)
    audit = SimpleNamespace(enabled=True, entries=[], page=lambda **_: ([], None))
    audit.record = audit.entries.append
    gate = Gate.of(Keyring())
    gate.audit.put(audit)
    state = install_state(app, engine=first, models=router, gate=gate)
    metrics, clock, lanes = state.metrics, Clock(), []
    loader = Runtime(Settings(weights=folder / "coco.onnx", models_dir=folder), state, metrics)
    switch = ModelSwitch(router, loader, drain_max_s=5)
    state.switch.put(switch)

    def lane(candidate, current, book, comparable, counted):
        lanes.append(StillLane(book))
        return lanes[-1]

    def record(action, model, before, after):
        audit.record(AuditEntry("system:rollout", action, model, before=before, after=after))

    controller = RolloutController(router, switch, metrics, lanes=lane, floor=lambda precision: 0.9,
                                   record=record, clock=clock)
    state.rollouts.put(controller)
    with TestClient(app, raise_server_exceptions=False) as client:
        yield SimpleNamespace(client=client, router=router, switch=switch, loader=loader, audit=audit, first=first,
                              controller=controller, clock=clock, lanes=lanes, metrics=metrics, state=state)
    for engine in [first, *loader.built]:
        engine.begin_drain()
        engine.stop()


def start(env, weights="coco-v2.onnx", cameras=None, **settings):
    values = {"window_s": 10.0, "min_frames": 5, **settings}
    return env.controller.start("coco", weights, cameras, RolloutSettings(**values),
                                floor_given="agreement_floor" in settings)


def sample(env, name: str, **labels: str) -> float | None:
    return env.metrics.registry.get_sample_value(name, {"model": "coco", **labels})


def actions(env) -> list[str]:
    return [e.action for e in env.audit.entries]


def test_a_candidate_that_agrees_goes_shadow_canary_promoted_once_each_window_has_held(env):
    # before any rollout the dashboard's series exist: no phase, nothing compared, no floor
    assert [sample(env, "campusguard_rollout_phase", phase=p) for p in ("shadow", "canary", "promoted",
                                                                         "rolled_back")] == [0, 0, 0, 0]
    assert math.isnan(sample(env, "campusguard_rollout_agreement"))
    assert math.isnan(sample(env, "campusguard_rollout_agreement_floor"))
    r = start(env)
    assert r.phase == "shadow" and r.cameras == ["a", "b"]  # the first half of coco's cameras
    assert r.settings.agreement_floor == 0.9  # the served precision's floor
    assert sample(env, "campusguard_rollout_agreement_floor") == 0.9  # what the agreement is held against
    assert sample(env, "campusguard_rollout_phase", phase="shadow") == 1
    candidate = env.loader.built[0]
    book = env.lanes[0].book
    # shadow: every camera answered by the current engine, the current side tapped
    assert env.router.serving("coco", "a", env.first) == (env.first, env.lanes[0].taps["current"])
    feed(book, 5)
    env.clock.now += 5
    env.controller.tick()
    assert r.phase == "shadow", "the window holds enough frames, but the phase has not lasted window_s yet"
    env.clock.now += 5
    env.controller.tick()
    assert r.phase == "canary" and r.reason is None and r.phase_started_at is not None
    assert env.router.serving("coco", "a", env.first) == (candidate, env.lanes[0].taps["candidate"])
    assert env.router.serving("coco", "c", env.first)[0] is env.first  # not a canary camera
    assert env.router.serving("coco", None, env.first)[0] is env.first  # ?model= alone: never the canary
    assert book.window().compared == 0, "the canary's window starts empty"
    env.clock.now += 10
    env.controller.tick()
    assert r.phase == "canary", "a canary window that never fills never promotes"
    feed(book, 5)
    env.clock.now += 1
    env.controller.tick()
    assert r.phase == "promoted" and r.ended_at is not None and "canary held" in r.reason
    assert env.router.models.engine("coco") is candidate
    assert env.router.models.get("coco").weights.name == "coco-v2.onnx"
    assert len(env.loader.built) == 1, "promotion serves the loaded candidate: no second load"
    assert env.switch.wait_drained("coco", 10) and env.loader.freed == [env.first]
    assert env.lanes[0].stopped and env.router.serving("coco", "a", candidate) == (candidate, NO_TAP)
    assert actions(env) == ["model.rollout.canary", "model.rollout.promote"]
    assert all(e.actor == "system:rollout" for e in env.audit.entries)
    assert sample(env, "campusguard_rollout_phase", phase="promoted") == 1
    assert sample(env, "campusguard_rollout_phase", phase="canary") == 0
    assert sample(env, "campusguard_rollout_total", outcome="promoted") == 1
    assert sample(env, "campusguard_rollout_total", outcome="rolled_back") == 0
    assert sample(env, "campusguard_rollout_agreement") == 1.0
    assert [p["phase"] for p in r.as_dict()["history"]] == ["shadow", "shadow", "canary", "canary"]
    env.switch.swap("coco", "coco.onnx")  # the name is released: changes are accepted again


@pytest.mark.parametrize(("fed", "why"), [
    (dict(frame=HALF), "agreement 0.500 below the floor 0.9"),
    (dict(candidate_errors=2), "errors: candidate 3/5 frames, current 0/5"),  # 2 of the first 4, 1 of 1
    (dict(candidate_ms=25.0), "latency: candidate p50 25.0 ms, current 10.0 ms"),
])
def test_a_window_out_of_bounds_rolls_back_at_once_and_frees_the_candidate(env, fed, why):
    r = start(env)
    feed(env.lanes[0].book, 4, **fed)
    env.controller.tick()
    assert r.phase == "shadow", "fewer than min_frames compared: no verdict either way"
    feed(env.lanes[0].book, 1, **fed)
    env.controller.tick()  # no wait for window_s: a failing full window rolls back now
    assert r.phase == "rolled_back" and why in r.reason and r.reason.startswith("shadow: ")
    assert env.router.serving("coco", "a", env.first)[0] is env.first
    assert env.router.models.engine("coco") is env.first
    assert env.switch.wait_drained("coco", 10) and env.loader.freed == env.loader.built
    assert actions(env) == ["model.rollout.rollback"] and why in env.audit.entries[0].after
    assert sample(env, "campusguard_rollout_total", outcome="rolled_back") == 1
    assert sample(env, "campusguard_rollout_phase", phase="rolled_back") == 1


def test_a_canary_that_disagrees_is_rolled_back_and_its_cameras_go_back(env):
    r = start(env, cameras=["c"])
    feed(env.lanes[0].book, 5)
    env.clock.now += 10
    env.controller.tick()
    assert r.phase == "canary" and env.router.serving("coco", "c", env.first)[0] is env.loader.built[0]
    feed(env.lanes[0].book, 5, frame=HALF)
    env.controller.tick()
    assert r.phase == "rolled_back" and r.reason.startswith("canary: agreement")
    assert env.router.serving("coco", "c", env.first)[0] is env.first
    assert actions(env) == ["model.rollout.canary", "model.rollout.rollback"]


def test_judge_needs_min_frames_and_allows_the_bounds():
    settings = RolloutSettings(min_frames=4, agreement_floor=0.9, max_error_ratio=0.25, max_latency_ratio=2.0)
    counts = {"candidate": 4, "current": 4}

    def window(agreement=0.95, errors=(0, 0), p50=(10.0, 10.0), compared=4):
        return Window(compared, agreement, counts, dict(zip(counts, errors, strict=True)),
                      dict(zip(counts, p50, strict=True)))

    assert judge(settings, window(agreement=0.1, compared=3), True) is None
    assert judge(settings, window(), True) is None
    assert judge(settings, window(agreement=0.9), True) is None  # at the floor: holds
    assert judge(settings, window(agreement=0.1), False) is None  # other classes: agreement is not judged
    assert judge(settings, window(errors=(1, 0)), True) is None  # 0.25 more per frame: at the bound
    assert "errors" in judge(settings, window(errors=(2, 0)), True)
    assert judge(settings, window(p50=(20.0, 10.0)), True) is None
    assert "latency" in judge(settings, window(p50=(20.1, 10.0)), True)


def test_refusals_change_nothing(env):
    with pytest.raises(UnknownModel):
        env.controller.start("nope", "coco-v2.onnx", None, RolloutSettings(), False)
    with pytest.raises(InvalidRollout, match="do not use model 'coco'"):
        start(env, cameras=["a", "gate"])  # gate's frames go to campus
    with pytest.raises(InvalidRollout):
        start(env, cameras=[])
    with pytest.raises(NoRollout):
        env.controller.get("coco")
    assert env.loader.built == []
    start(env)
    with pytest.raises(RolloutInProgress):
        start(env)
    with pytest.raises(ModelConflict) as busy:
        env.switch.swap("coco", "coco.onnx")
    assert busy.value.code == "model_busy"
    with pytest.raises(RolloutPhaseConflict):
        env.controller.promote("coco")  # only a canary
    env.controller.abort("coco", "alice")
    r = env.controller.get("coco")
    assert r.phase == "rolled_back" and r.reason == "aborted by hand by alice in shadow"
    with pytest.raises(RolloutPhaseConflict) as ended:
        env.controller.abort("coco")
    assert ended.value.code == "rollout_ended"
    assert sample(env, "campusguard_rollout_total", outcome="aborted") == 1


def test_a_candidate_with_other_classes_needs_the_labelled_set(env):
    with pytest.raises(GateDatasetRequired):
        start(env, weights="campus.onnx")
    assert env.switch.wait_drained("coco", 10) and env.loader.freed == env.loader.built  # loaded, then freed
    assert env.controller.latest("coco") is None and env.router.models.engine("coco") is env.first
    figures = {"shared_classes": 0, "current_map": 0.4, "candidate_map": 0.41, "floor": 0.39}
    env.controller.map_gate = lambda name, current, candidate, floor: figures
    r = start(env, weights="campus.onnx")
    assert r.phase == "canary" and not r.comparable and r.map_figures == figures
    feed(env.lanes[0].book, 5, frame=None)
    env.clock.now += 10
    env.controller.tick()
    assert r.phase == "promoted" and r.window.agreement is None
    assert math.isnan(sample(env, "campusguard_rollout_agreement"))


def test_the_routes_speak_the_contract(env):
    c = env.client
    assert c.get("/admin/models/coco/rollout").json()["error"] == "no_rollout"
    assert c.post("/admin/models/nope/rollout", json={"weights": "coco-v2.onnx"}).status_code == 404
    bad = c.post("/admin/models/coco/rollout", json={"weights": "../x.onnx"})
    assert bad.status_code == 422 and bad.json()["error"] == "invalid_weights"
    started = c.post("/admin/models/coco/rollout", json={"weights": "coco-v2.onnx", "window_s": 10, "min_frames": 5,
                                                          "agreement_floor": 0.8})
    assert started.status_code == 202, started.text
    body = started.json()
    assert {k: body[k] for k in ("model", "candidate_weights", "current_weights", "phase", "reason", "cameras",
                                 "compared", "agreement", "errors", "latency_ms", "ended_at")} == {
        "model": "coco", "candidate_weights": "coco-v2.onnx", "current_weights": "coco.onnx", "phase": "shadow",
        "reason": None, "cameras": ["a", "b"], "compared": 0, "agreement": None,
        "errors": {"candidate": 0, "current": 0}, "latency_ms": {"candidate_p50": None, "current_p50": None},
        "ended_at": None}
    assert body["settings"] == {"window_s": 10.0, "min_frames": 5, "agreement_floor": 0.8, "max_error_ratio": 0.01,
                                "max_latency_ratio": 2.0, "map_floor": None}
    assert body["started_at"].endswith("Z") and body["history"] == []
    again = c.post("/admin/models/coco/rollout", json={"weights": "coco-v2.onnx"})
    assert again.status_code == 409 and again.json()["error"] == "rollout_in_progress"
    assert c.post("/admin/models/coco/rollout/promote").json()["error"] == "rollout_not_canary"
    feed(env.lanes[0].book, 5)
    env.controller.tick()
    listed = c.get("/models").json()["models"][0]["rollout"]
    assert listed["compared"] == 5 and listed["agreement"] == 1.0 and len(listed["history"]) == 1
    env.clock.now += 10
    env.controller.tick()
    promoted = c.post("/admin/models/coco/rollout/promote")
    assert promoted.status_code == 200 and promoted.json()["phase"] == "promoted"
    assert promoted.json()["reason"] == "promoted by hand by anonymous"
    assert c.delete("/admin/models/coco/rollout").json()["error"] == "rollout_ended"
    assert [(e.action, e.outcome) for e in env.audit.entries] == [
        ("model.rollout.start", "refused"), ("model.rollout.start", "refused"), ("model.rollout.start", "ok"),
        ("model.rollout.start", "refused"), ("model.rollout.promote", "refused"), ("model.rollout.canary", "ok"),
        ("model.rollout.promote", "ok"), ("model.rollout.abort", "refused")]


def test_the_comparator_runs_the_other_side_and_counts_errors_apart_from_busy_engines():
    current, candidate = make_engine(FakeDetector()), make_engine(FakeDetector())
    book = CandidateBook(60.0)
    counted = []
    lane = CandidateLane(candidate, lambda: current, book, CandidateOptions(queue_size=4, max_fps=1000),
                         on_compared=lambda: counted.append(1))
    lane.start()
    try:
        result = asyncio.run(current.detect(IMAGE, DetectParams()))
        for _ in range(3):
            lane.taps["current"].answered("a", IMAGE, DetectParams(), "none", result)
        lane.taps["current"].failed("a", InferenceFailed("boom"))
        lane.taps["current"].failed("a", QueueFull())  # a full engine: no verdict on the model
        lane.taps["current"].failed("a", InvalidImage("not an image"))  # the caller's fault
        deadline = time.monotonic() + 20
        while len(counted) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        window = book.window()
        assert window.compared == 3 and window.agreement == 1.0 and counted == [1, 1, 1]
        assert window.frames == {"candidate": 3, "current": 4} and window.errors == {"candidate": 0, "current": 1}
        assert window.p50_ms["candidate"] is not None
        assert failure(QueueFull()) is None and failure(InvalidImage("x")) is False and failure(RuntimeError()) is True
    finally:
        lane.stop()
        for engine in (current, candidate):
            engine.begin_drain()
            engine.stop()


def test_a_full_comparator_skips_frames_instead_of_waiting():
    book = CandidateBook(60.0)
    engine = make_engine(FakeDetector())
    lane = candidate_lane(SimpleNamespace(engine=engine), lambda: engine, book, True, lambda: None,
                          CandidateOptions(queue_size=2, max_fps=0.001))  # not started: nothing drains the queue
    try:
        result = asyncio.run(engine.detect(IMAGE, DetectParams()))
        taken = [lane.offer("current", "a", IMAGE, DetectParams(), result) for _ in range(5)]
        assert taken == [True, True, False, False, False] and book.skipped == 3
    finally:
        engine.begin_drain()
        engine.stop()


def test_detect_routes_a_canary_camera_to_the_candidate(env):
    start(env, cameras=["c"])
    feed(env.lanes[0].book, 5)
    env.clock.now += 10
    env.controller.tick()
    candidate = env.loader.built[0]
    before = len(candidate.pipeline.detector.calls)
    for camera in ("c", "a"):
        r = env.client.post("/detect", params={"camera_id": camera}, files={"image": ("a.png", png(), "image/png")})
        assert r.status_code == 200, r.text
    assert len(candidate.pipeline.detector.calls) == before + 1, "only the canary camera's frame"
    assert env.lanes[0].taps["candidate"].answered_by == ["c"] and env.lanes[0].taps["current"].answered_by == []
    live = LiveFlow(env.router, NoRules(), NoShadow, env.metrics)  # the embedded ingest's frames: the same routing
    assert live("c").engine is candidate and live("c").tap is env.lanes[0].taps["candidate"]
    assert live("a").engine is env.first and live("a").tap is NO_TAP


def test_a_promotion_is_told_to_the_switchs_observers_as_a_swap_and_a_rollback_is_not(env):
    """The replicas' sync and the shadow reference follow a promotion as they follow a swap
    (docs/models.md, "Replicas and restarts"); a rolled-back candidate never served the name."""
    seen = []
    env.switch.observer = SimpleNamespace(changed=seen.append)
    r = start(env)
    feed(env.lanes[0].book, 5, frame=FrameScore(10, 10, 2, 0.0))  # agreement 0.2: below the floor
    env.clock.now += 1
    env.controller.tick()
    assert r.phase == "rolled_back" and seen == []
    assert env.switch.wait_drained("coco", 10)  # the candidate freed: the name takes changes again
    r = start(env)
    feed(env.lanes[1].book, 5)
    env.clock.now += 10
    env.controller.tick()
    assert r.phase == "canary"
    env.controller.promote("coco", "tester")
    assert r.phase == "promoted"
    assert [(c.action, c.name, c.after.weights.name) for c in seen] == [("swap", "coco", "coco-v2.onnx")]
