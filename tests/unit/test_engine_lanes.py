"""Requests kept in flight: the engine's lanes, the shared OpenVINO request pool and the call count.

Mechanics with fakes; the real runtimes run side by side in tests/integration/test_openvino.py
and test_onnx_inflight.py, and the speed is `campusguard bench` (docs/benchmarks.md).
"""

from __future__ import annotations

import asyncio
import threading
import time

import numpy as np
import pytest

from app.core.errors import InferenceFailed, InferenceTimeout
from app.inference.backends.inflight import CallCount, RequestPool
from app.inference.backends.shapeset import ShapeSet
from app.inference.pipeline import DetectParams
from tests.support.fakes import IMAGE, FakeDetector, detect_many, make_engine
from tests.support.faults import WorkerCrash


@pytest.mark.parametrize("lanes", [1, 2, 3])
def test_each_lane_keeps_one_call_in_flight(lanes):
    det = FakeDetector(delay=0.15, lanes=lanes)
    engine = make_engine(det, max_batch_size=1)
    results = asyncio.run(detect_many(engine, 6))
    engine.stop()
    assert all(len(r.detections) == 1 for r in results)
    assert det.most_running == lanes  # one lane: calls serialised; more: side by side, never more than lanes
    assert len(engine.state.lanes) == lanes


def test_a_set_of_sessions_per_shape_keeps_its_members_lanes():
    """ONNX Runtime builds one session per shape (``SHAPES``) behind a ShapeSet: the engine must
    run the members' lanes, not one (it did, and the model idled 23 % of the time under load)."""
    members = {(32, 32): FakeDetector(delay=0.15, lanes=2), (16, 32): FakeDetector(delay=0.15, lanes=2)}
    detector = ShapeSet(members)
    assert detector.lanes == 2 and detector.inflight == 1  # the fakes declare no inflight: 1
    assert ShapeSet({(32, 32): FakeDetector(lanes=3), (16, 32): FakeDetector(lanes=2)}).lanes == 2
    engine = make_engine(detector, max_batch_size=1)
    results = asyncio.run(detect_many(engine, 6))
    engine.stop()
    assert all(len(r.detections) == 1 for r in results) and len(engine.state.lanes) == 2
    assert max(member.most_running for member in members.values()) == 2  # two calls side by side


def test_several_lanes_take_what_is_queued_without_waiting_for_a_batch():
    # every frame is its own request on a multi-lane runtime: the queue delay would only idle a stream
    det = FakeDetector(lanes=2)
    engine = make_engine(det, max_queue_delay_ms=5000)
    result = asyncio.run(engine.detect(IMAGE, DetectParams()))
    engine.stop()
    assert det.calls == [1] and result.timings_ms["queue_wait_ms"] < 2500


class EchoesItsInput(FakeDetector):
    """Scores each image by its own pixels: a batch buffer shared by two lanes would mix them up."""

    def _answer(self, call: int, batch: np.ndarray) -> np.ndarray:
        out = super()._answer(call, batch)
        time.sleep(0.05)  # the other lane writes its batch meanwhile
        out[:, 4, 0] = batch.reshape(len(batch), -1).mean(axis=1)
        return out


def test_each_lane_writes_its_own_batch_buffer():
    det = EchoesItsInput(lanes=2)
    engine = make_engine(det, max_batch_size=2)
    levels = [0.3, 0.5, 0.7, 0.9] * 2

    images = [np.full((24, 40, 3), round(v * 255), np.uint8) for v in levels]
    # what each image's own letterboxed input averages (its padding included)
    expected = [engine.pipeline.prepare(img).letterboxed.mean() / 255 for img in images]

    async def scenario():
        return await asyncio.gather(*(engine.detect(img, DetectParams(conf=0.1)) for img in images))

    results = asyncio.run(scenario())
    engine.stop()
    assert det.most_running == 2 and len(set(np.round(expected, 3))) == 4
    for want, result in zip(expected, results):
        assert result.detections[0].confidence == pytest.approx(want, abs=0.005)


class HangsOnce(FakeDetector):
    def __init__(self) -> None:
        super().__init__(lanes=2)
        self.release = threading.Event()

    def _answer(self, call: int, batch: np.ndarray) -> np.ndarray:
        if call == 0:
            self.release.wait(10)
        return super()._answer(call, batch)


def test_a_hung_lane_trips_the_watchdog_while_the_other_lane_serves():
    det = HangsOnce()
    engine = make_engine(det, max_batch_size=1, inference_timeout_s=0.6, watchdog_exit=False)

    async def scenario():
        hung = asyncio.ensure_future(engine.detect(IMAGE, DetectParams()))
        await asyncio.sleep(0.1)
        served = await engine.detect(IMAGE, DetectParams())  # the other lane answers meanwhile
        return served, await asyncio.gather(hung, return_exceptions=True)

    served, (hung,) = asyncio.run(scenario())
    det.release.set()
    engine.stop()
    assert len(served.detections) == 1
    assert isinstance(hung, InferenceTimeout) and engine.state.tripped and not engine.ready


class CrashesOnce(FakeDetector):
    def _answer(self, call: int, batch: np.ndarray) -> np.ndarray:
        if call == 0:
            raise WorkerCrash("a lane's thread dies")  # not an Exception: the worker itself goes down
        return super()._answer(call, batch)


def test_a_dead_lane_is_restarted_and_the_engine_serves_again():
    det = CrashesOnce(lanes=2)
    engine = make_engine(det, max_batch_size=1)
    first = asyncio.run(detect_many(engine, 1))[0]
    deadline = time.monotonic() + 10
    while engine.metrics.worker_restarts._value.get() < 1 and time.monotonic() < deadline:
        time.sleep(0.05)  # the answer can come before the dying lane is marked dead
    while not engine.ready and time.monotonic() < deadline:
        time.sleep(0.05)
    after = asyncio.run(detect_many(engine, 4))
    restarts = engine.metrics.worker_restarts._value.get()
    engine.stop()
    assert isinstance(first, InferenceFailed)
    assert restarts == 1 and all(len(r.detections) == 1 for r in after)


def test_call_count_says_who_is_alone():
    calls = CallCount()
    with calls.enter() as first:
        with calls.enter() as second:
            assert first and not second
    with calls.enter() as again:
        assert again


class FakeRequest:
    """An OpenVINO infer request: start_async runs in a thread, wait joins it, and every run
    writes into the request's one output buffer, as OpenVINO's does."""

    def __init__(self, pool_state: dict) -> None:
        self.state, self.thread, self.output = pool_state, None, None
        self.buffer = np.zeros((1, 5, 3), np.float32)

    def start_async(self, inputs: dict, share_inputs: bool = True) -> None:
        frame = inputs[0]
        if float(frame.max()) < 0:
            raise RuntimeError("refused at start")

        def work() -> None:
            with self.state["lock"]:
                self.state["running"] += 1
                self.state["most"] = max(self.state["most"], self.state["running"])
            time.sleep(0.02)
            if float(frame.max()) > 1:
                self.output = None
            else:
                self.buffer[...] = float(frame.mean())
                self.output = self.buffer
            with self.state["lock"]:
                self.state["running"] -= 1

        self.thread = threading.Thread(target=work, daemon=True)
        self.thread.start()

    def wait(self) -> None:
        if self.thread is not None:
            self.thread.join()
        if self.output is None:
            raise RuntimeError("the request failed")

    def get_output_tensor(self, index: int):
        return type("Tensor", (), {"data": self.output})()


class FakeCompiled:
    def __init__(self) -> None:
        self.state = {"lock": threading.Lock(), "running": 0, "most": 0}

    def create_infer_request(self) -> FakeRequest:
        return FakeRequest(self.state)


def frames(values) -> np.ndarray:
    return np.stack([np.full((3, 2, 2), v, np.float32) for v in values])


def run(pool: RequestPool, batch: np.ndarray) -> np.ndarray:
    """The pool's answers stacked (each a copy: the request's buffer is reused)."""
    return np.stack(pool.run(batch, lambda _, out: out[0].copy()))


def test_the_request_pool_serves_concurrent_calls_in_order_and_never_deadlocks():
    compiled = FakeCompiled()
    pool = RequestPool(compiled, 2)
    outputs: dict[int, np.ndarray] = {}

    def call(k: int) -> None:  # three callers, batches larger than the pool
        values = [(k * 10 + i) / 100 for i in range(5)]
        outputs[k] = run(pool, frames(values))[:, 0, 0]

    threads = [threading.Thread(target=call, args=(k,), daemon=True) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert not any(t.is_alive() for t in threads)
    for k in range(3):
        assert np.allclose(outputs[k], [(k * 10 + i) / 100 for i in range(5)])  # each call its own, in order
    assert compiled.state["most"] == 2  # side by side, never more than the pool


def test_a_failed_request_fails_its_call_and_every_request_goes_back():
    pool = RequestPool(FakeCompiled(), 2)
    with pytest.raises(InferenceFailed):
        run(pool, frames([0.1, 2.0, 0.3]))  # the second request fails
    with pytest.raises(RuntimeError):
        run(pool, frames([0.1, -1.0]))  # refused at start
    assert run(pool, frames([0.1, 0.2, 0.3]))[:, 0, 0].tolist() == pytest.approx([0.1, 0.2, 0.3])
    assert pool._idle.qsize() == 2

    def refuse(index: int, output: np.ndarray) -> None:
        raise ValueError("keep failed")

    with pytest.raises(InferenceFailed, match="keep failed"):
        pool.run(frames([0.1, 0.2]), refuse)
    assert pool._idle.qsize() == 2  # a failing keep still returns every request


def test_keep_reads_the_request_before_it_goes_back_to_the_pool():
    pool = RequestPool(FakeCompiled(), 2)
    idle_at_keep = []

    def keep(index: int, output: np.ndarray) -> float:
        idle_at_keep.append(pool._idle.qsize())  # the request being read is not idle yet
        return float(output[0, 0, 0])

    assert pool.run(frames([0.25]), keep) == [pytest.approx(0.25)]
    assert idle_at_keep == [1] and pool._idle.qsize() == 2
