"""ONNX Runtime on the CPU with requests in flight (CAMPUSGUARD_REQUESTS_IN_FLIGHT, issue #32).

The mechanics only, on the real yolov8n export at imgsz 320: the runs of a micro-batch really
overlap (a barrier only two concurrent runs can pass), the outputs are those of one request
at a time, and a bad frame among good ones is still answered on its own. No timing: the
speed is `campusguard bench --stage inflight` (docs/benchmarks.md, "Requests in flight").
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from app import wiring
from app.config import Settings
from app.inference.backends.onnx_inflight import FanOut, auto_inflight
from tests.support.inprocess import wait_until_ready

pytestmark = pytest.mark.timeout(300)
IMGSZ = 320


def settings(weights, cache, **extra) -> Settings:
    return Settings(_env_file=None, **({"backend": "onnx", "weights": weights, "imgsz": IMGSZ, "threads": 2,
                                        "warmup_iters": 0, "onnx_cache_dir": cache} | extra))


@pytest.fixture(scope="module")
def detectors(weights, onnx_cache):
    """The same export with 2 requests in flight and with 1."""
    two = wiring.load_detector(settings(weights, onnx_cache, requests_in_flight=2))
    one = wiring.load_detector(settings(weights, onnx_cache, requests_in_flight=1))
    yield two, one
    two.close()
    one.close()


@pytest.fixture(scope="module")
def batch(dataset) -> np.ndarray:
    from app.inference.vision.decode import decode_image
    from app.inference.vision.preprocess import letterbox, to_batch

    files = sorted((dataset / "images").iterdir())[:4]
    return to_batch([letterbox(decode_image(p.read_bytes(), 10**8), (IMGSZ, IMGSZ))[0] for p in files])


def test_auto_is_one_request_per_core_of_the_budget(weights, onnx_cache, detectors):
    """Auto (0) on ORT CPU: one request in flight per thread of the budget (through the server
    2 in flight measured 1.09x one on 2 cores: docs/benchmarks.md); 1 turns the fan-out off."""
    assert auto_inflight(2) == 2 and auto_inflight(1) == 1 and auto_inflight(0) == 1
    assert detectors[0].inflight == 2 and detectors[1].inflight == 1 and detectors[1]._fan_out is None
    auto = wiring.load_detector(settings(weights, onnx_cache))  # REQUESTS_IN_FLIGHT=0: auto, 2 threads
    try:
        assert auto.inflight == auto.lanes == 2 and auto._fan_out is not None
    finally:
        auto.close()


def test_one_session_per_shape_keeps_the_lanes(weights, onnx_cache):
    """SHAPES gives one exported session per shape behind a ShapeSet; the engine's lanes are the
    members' (a set that declared none ran one lane: the model idled while frames queued)."""
    from app.inference.backends.shapeset import ShapeSet
    from app.inference.pipeline import Pipeline

    detector = wiring.load_detector(settings(weights, onnx_cache, shapes="192x320", requests_in_flight=2))
    try:
        assert isinstance(detector, ShapeSet) and set(detector.shapes) == {(320, 320), (192, 320)}
        assert all(member.lanes == 2 for member in detector.members.values())
        assert detector.lanes == detector.inflight == 2 and Pipeline(detector).lanes == 2
    finally:
        detector.close()


def test_runs_overlap_and_match_one_at_a_time(detectors, batch):
    """Each image's run waits at a two-party barrier: the batch only completes if two runs are
    in ``session.run``'s neighbourhood at once (one at a time would break the barrier)."""
    two, one = detectors
    fan_out = two._fan_out
    real_run = fan_out._run
    barrier = threading.Barrier(2, timeout=20)
    inside, most = [0], [0]
    lock = threading.Lock()

    def run(image: np.ndarray) -> np.ndarray:
        with lock:
            inside[0] += 1
            most[0] = max(most[0], inside[0])
        try:
            barrier.wait()
            return real_run(image)
        finally:
            with lock:
                inside[0] -= 1

    fan_out._run = run
    try:
        together = two.infer(batch)
    finally:
        fan_out._run = real_run
    assert most[0] == 2 and not barrier.broken
    alone = one.infer(batch)
    assert together.shape == alone.shape == (4, 84, 2100)
    np.testing.assert_allclose(together, alone, atol=1e-3)
    np.testing.assert_allclose(two.infer(batch[:1]), alone[:1], atol=1e-3)  # a single frame: the main session
    # the engine's two lanes call it at once: a lone frame beside another call runs on the
    # one-thread session, and every answer is still the one-at-a-time answer
    assert two.lanes == 2 and one.lanes == 1
    with ThreadPoolExecutor(2) as pool:
        answers = list(pool.map(lambda _: np.concatenate([two.infer(batch[i:i + 1]) for i in range(4)]), range(2)))
    for answer in answers:
        np.testing.assert_allclose(answer, alone, atol=1e-3)


def test_a_failing_run_fails_its_batch_after_every_run_ended():
    """Like a batch run: the engine answers that batch with the error; no run is left behind."""
    finished: list[int] = []

    def run(image: np.ndarray) -> np.ndarray:
        if image[0, 0] == 1:
            raise RuntimeError("run 1 failed")
        finished.append(int(image[0, 0]))
        return image

    fan_out = FanOut(run, 2)
    with pytest.raises(RuntimeError, match="run 1 failed"):
        fan_out(np.arange(4, dtype=np.float32).reshape(4, 1))
    assert sorted(finished) == [0, 2, 3]
    np.testing.assert_array_equal(fan_out(np.array([[5.0], [6.0]], np.float32)), [[5.0], [6.0]])
    fan_out.close()
    with pytest.raises(ValueError, match="at least 2"):
        FanOut(run, 1)


def test_server_answers_each_frame_on_its_own(weights, onnx_cache, dataset, bus_jpg, detectors):
    """4 concurrent clients on the real app with 2 in flight: the bad frame gets its own error,
    the good ones the detections of one request at a time."""
    from fastapi.testclient import TestClient

    from app.main import create_app

    pipeline = wiring.build_pipeline(settings(weights, onnx_cache), detectors[1])  # one request at a time
    files = sorted((dataset / "images").iterdir())[:3]
    blobs = [p.read_bytes() for p in files] + [bus_jpg]
    expected = [sorted(d.class_name for d in dets) for dets in pipeline.detect(blobs)]
    payloads = blobs + [b"this is not a jpeg"]
    with TestClient(create_app(settings(weights, onnx_cache, requests_in_flight=2, max_queue_delay_ms=50))) as client:
        wait_until_ready(client, 120, 0.2)
        assert client.get("/health").json()["backend"] == "onnx"

        def post(data: bytes):
            return client.post("/detect", files={"image": ("f.jpg", data, "image/jpeg")})

        with ThreadPoolExecutor(5) as pool:
            replies = list(pool.map(post, payloads))
    assert [r.status_code for r in replies[:4]] == [200] * 4
    assert replies[4].status_code in (400, 415, 422) and "detections" not in replies[4].json()
    got = [sorted(d["class_name"] for d in r.json()["detections"]) for r in replies[:4]]
    assert got == expected
