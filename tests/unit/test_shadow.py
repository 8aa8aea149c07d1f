"""The shadow lane's mechanics in-process (fake models): agreement maths, sampling, drops,
/status, /metrics, GET /shadow/worst with its roles and bad input, startup errors."""

from __future__ import annotations

import random
import threading

import cv2
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families
from pydantic import ValidationError

from app import wiring
from app.api.state import state_of
from app.config import Settings
from app.core.errors import ConfigError
from app.inference.pipeline import DetectParams
from app.inference.shadow.book import AgreementBook, score
from app.inference.shadow.lane import ShadowOptions
from app.main import preflight
from app.tooling.bench.parity import compare
from tests.support.fakes import FakeDetector
from tests.support.inprocess import IMGSZ, SCENE, inprocess_app, png
from tests.support.shadow import fake_lane

KEYS = "viewer:v-key-123456,operator:o-key-123456,admin:a-key-123456"


def settings(**extra) -> Settings:
    return Settings(_env_file=None, imgsz=IMGSZ, threads=1, preprocess_workers=1, warmup_iters=0, **extra)


class PersonOnlyReference(FakeDetector):
    """A reference that sees the person but not the car the primary reports."""

    def __init__(self) -> None:
        super().__init__(**SCENE)

    def infer(self, batch: np.ndarray) -> np.ndarray:
        out = super().infer(batch)
        out[:, 5, 1] = 0.0
        return out


def samples(text: str, name: str) -> dict[tuple, float]:
    return {tuple(sorted(s.labels.items())): s.value for f in text_string_to_metric_families(text)
            for s in f.samples if s.name == name}


def test_window_agreement_is_the_f1_of_parity_recall_and_precision():
    rng = random.Random(7)

    def boxes(n: int) -> list[list[float]]:
        out = []
        for _ in range(n):
            x, y = rng.uniform(0, 500), rng.uniform(0, 500)
            out.append([x, y, x + rng.uniform(20, 80), y + rng.uniform(20, 80), rng.uniform(0.3, 1), rng.randrange(3)])
        return out

    reference = {f"{i}.jpg": boxes(rng.randrange(0, 6)) for i in range(40)}
    primary = {}
    for name, ref in reference.items():  # some kept (jittered), some lost, some extra
        kept = [[b[0] + rng.uniform(-4, 4), b[1], b[2], b[3] + rng.uniform(-4, 4), b[4] - 0.02, b[5]]
                for b in ref if rng.random() < 0.8]
        primary[name] = kept + boxes(rng.randrange(0, 2))
    book = AgreementBook(900.0)
    for name in reference:
        book.add("gate-1", score(primary[name], reference[name]))
    parity = compare(reference, primary)
    f1 = 2 * parity.recall * parity.box_precision / (parity.recall + parity.box_precision)
    s = book.summary("gate-1")
    assert 0.5 < s.agreement < 0.95  # the data disagrees: the check can fail
    assert s.agreement == pytest.approx(f1, abs=1e-9)
    assert (s.recall, s.precision) == pytest.approx((parity.recall, parity.box_precision))
    assert s.confidence_drift == pytest.approx(-0.02, abs=1e-6) and s.frames == 40
    assert book.summary().agreement == pytest.approx(f1)  # overall: the one camera


def test_window_forgets_old_frames():
    now = [0.0]
    book = AgreementBook(window_s=60.0, clock=lambda: now[0])
    book.add("a", score([], [[0, 0, 10, 10, 0.9, 0]]))  # missed: agreement 0
    now[0] = 61.0
    book.add("a", score([[0, 0, 10, 10, 0.9, 0]], [[0, 0, 10, 10, 0.9, 0]]))
    assert book.summary("a").frames == 1 and book.summary("a").agreement == 1.0


def test_sampling_rate_and_per_camera_interval():
    with inprocess_app(settings()) as env:
        closed = threading.Event()  # the engine is never idle: nothing leaves the queue
        lane = fake_lane(env, ShadowOptions(sample=0.0, min_interval_s=60.0, queue_size=2000), idle=closed.is_set)
        params = DetectParams()
        assert lane.offer("gate-1", b"x", params, [])  # first frame of a camera: due
        assert not lane.offer("gate-1", b"x", params, [])  # within its interval, sample 0
        assert lane.offer("gate-2", b"x", params, [])
        assert not lane.offer(None, b"x", params, [])  # no camera: only the random sample
        lane.options = ShadowOptions(sample=0.25, min_interval_s=0.0, queue_size=2000)
        taken = sum(lane.offer(None, b"x", params, []) for _ in range(2000))
        assert 400 < taken < 600
        lane.stop()


def test_a_burst_drops_and_counts_samples_and_detection_is_unaffected():
    with inprocess_app(settings()) as env:
        gate = threading.Event()
        lane = fake_lane(env, ShadowOptions(sample=1.0, min_interval_s=0.0, queue_size=2), idle=gate.is_set)
        for _ in range(10):
            r = env.client.post("/detect?camera_id=gate-1", files={"image": ("f.png", png(), "image/png")})
            assert r.status_code == 200 and len(r.json()["detections"]) == 2
        status = env.client.get("/status").json()["shadow"]
        assert status["enabled"] and status["sampled"] == 10 and status["dropped"]["busy"] >= 7
        assert status["queue"] + status["compared"] + status["dropped"]["busy"] <= 10
        metrics = env.client.get("/metrics").text
        model = ("model", state_of(env.app).models.default)
        busy = samples(metrics, "campusguard_shadow_dropped_total")[(model, ("reason", "busy"))]
        assert busy == status["dropped"]["busy"]
        gate.set()
        assert lane.drain(30)
        status = env.client.get("/status").json()["shadow"]
        assert status["compared"] + status["dropped"]["busy"] == 10 and status["compared"] >= 2
        assert status["overall"]["agreement"] == 1.0 and status["cameras"]["gate-1"]["frames"] == status["compared"]
        lane.stop()


def test_a_disagreeing_reference_shows_in_status_metrics_and_worst_frames():
    with inprocess_app(settings()) as env:
        lane = fake_lane(env, reference=PersonOnlyReference())
        for camera in ["gate-1"] * 7 + ["plaza"]:
            r = env.client.post(f"/detect?camera_id={camera}", files={"image": ("f.png", png(), "image/png")})
            assert r.status_code == 200
        assert lane.drain(30)
        status = env.client.get("/status").json()["shadow"]
        assert status["cameras"]["gate-1"]["agreement"] == pytest.approx(2 / 3, abs=1e-4)  # 2 * 1 / (2 + 1)
        assert status["cameras"]["gate-1"]["recall"] == 1.0 and status["cameras"]["gate-1"]["precision"] == 0.5
        metrics = env.client.get("/metrics").text
        model = ("model", state_of(env.app).models.default)  # the model the reference shadows
        agreement = samples(metrics, "campusguard_shadow_agreement")
        assert agreement[(("camera_id", "gate-1"), model)] == pytest.approx(2 / 3)
        assert agreement[(("camera_id", "_all"), model)] == pytest.approx(2 / 3)
        assert samples(metrics, "campusguard_shadow_compared_total")[(("camera_id", "gate-1"), model)] == 7
        listing = env.client.get("/shadow/worst?camera_id=gate-1").json()
        assert len(listing["frames"]) == 5  # bounded per camera
        frame = listing["frames"][0]
        assert frame["camera_id"] == "gate-1" and frame["agreement"] == pytest.approx(2 / 3, abs=1e-3)
        assert {b["class_name"] for b in frame["primary"]} == {"person", "car"}
        assert [b["class_name"] for b in frame["reference"]] == ["person"]
        assert len(env.client.get("/shadow/worst").json()["frames"]) == 6  # both cameras
        image = env.client.get(frame["image_url"])
        assert image.status_code == 200 and image.headers["content-type"] == "image/jpeg"
        drawn = cv2.imdecode(np.frombuffer(image.content, np.uint8), cv2.IMREAD_COLOR)
        assert drawn.shape[:2] == (48, 64)  # the original frame's size (under the width cap)
        lane.stop()


def test_shadow_routes_are_for_admins_only():
    with inprocess_app(settings(api_keys=KEYS)) as env:
        lane = fake_lane(env)
        assert env.client.get("/shadow/worst").status_code == 401
        for key in ("v-key-123456", "o-key-123456"):
            r = env.client.get("/shadow/worst", headers={"x-api-key": key})
            assert r.status_code == 403 and r.json()["error"] == "insufficient_role"
            assert env.client.get("/shadow/worst/0123456789abcdef.jpg",
                                  headers={"x-api-key": key}).status_code == 403
        assert env.client.get("/shadow/worst", headers={"x-api-key": "a-key-123456"}).status_code == 200
        status = env.client.get("/status", headers={"x-api-key": "v-key-123456"})
        assert status.status_code == 200 and status.json()["shadow"]["enabled"]  # the figures are for every reader
        lane.stop()


@pytest.mark.parametrize("query", ["camera_id=../etc", "camera_id=" + "a" * 65, "limit=0", "limit=501", "limit=x",
                                   "camera_id=%00"])
def test_bad_query_input_is_a_422(query):
    with inprocess_app(settings()) as env:
        lane = fake_lane(env)
        r = env.client.get(f"/shadow/worst?{query}")
        assert r.status_code == 422 and r.json()["error"] == "invalid_parameter", r.text
        lane.stop()


def test_bad_frame_ids_and_shadow_off():
    with inprocess_app(settings()) as env:
        r = env.client.get("/shadow/worst")
        assert r.status_code == 404 and r.json()["error"] == "shadow_disabled"
        assert env.client.get("/status").json()["shadow"] == {"enabled": False}
        metrics = env.client.get("/metrics").text  # the overall series exist with the shadow off
        model = ("model", state_of(env.app).models.default)
        assert np.isnan(samples(metrics, "campusguard_shadow_agreement")[(("camera_id", "_all"), model)])
        lane = fake_lane(env)
        assert env.client.get("/shadow/worst/not-an-id.jpg").status_code == 422
        r = env.client.get("/shadow/worst/0123456789abcdef.jpg")
        assert r.status_code == 404 and r.json()["error"] == "not_found"
        lane.stop()


def test_a_reference_that_cannot_load_is_a_startup_error(tmp_path, weights):
    missing = settings(weights=weights, shadow_backend="torch", shadow_weights=tmp_path / "missing.pt")
    with pytest.raises(ConfigError, match="CAMPUSGUARD_SHADOW_WEIGHTS: weights file not found"):
        preflight(missing)
    with pytest.raises(ConfigError, match="SHADOW_BACKEND=torch cannot load"):
        wiring.check_shadow(settings(weights=weights, shadow_backend="torch", shadow_weights=tmp_path / "m.onnx"))
    corrupt = tmp_path / "corrupt.pt"
    corrupt.write_bytes(b"not a checkpoint" * 64)
    with inprocess_app(settings(weights=weights)) as env:
        bad = settings(weights=weights, shadow_backend="torch", shadow_weights=corrupt)
        with pytest.raises(ConfigError, match=r"shadow reference .*corrupt\.pt.* failed to load"):
            wiring.build_shadow(bad, env.engine, state_of(env.app).metrics)
    for field, value in (("shadow_device", "gpu"), ("shadow_backend", "tensorrt"), ("shadow_sample", 1.5)):
        with pytest.raises(ValidationError):
            settings(**{field: value})


def test_the_alert_floor_follows_the_served_precision_unless_the_operator_sets_it():
    from prometheus_client import CollectorRegistry, generate_latest

    from app.inference.shadow.book import AgreementBook, alert_floor
    from app.inference.shadow.collector import ShadowCollector

    assert (alert_floor("fp32"), alert_floor("fp16"), alert_floor("bf16")) == (0.95, 0.95, 0.95)
    assert alert_floor("int8") == 0.85 and alert_floor("int8", 0.7) == 0.7 and alert_floor("fp32", 0.99) == 0.99
    registry = CollectorRegistry()
    registry.register(ShadowCollector(lambda: AgreementBook(alert_below=0.85), "coco"))
    assert 'campusguard_shadow_alert_below{model="coco"} 0.85' in generate_latest(registry).decode()
