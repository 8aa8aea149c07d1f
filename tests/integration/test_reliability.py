"""Overload, deadlines, faults, watchdog, shutdown and hostile input, against real server
processes with the real model (issue: reliability and security).

Two fault-injecting servers serve the module, each test switching its own fault
(tests/support/faults.py): one tuned for admission (small batches, a short deadline), one
for batch failures (batches of 4 collected for 200 ms, a deadline that never refuses). The
watchdog and SIGTERM end their process, so they get their own. Counters are compared
before and after each test, since a module's tests share a server."""

from __future__ import annotations

import asyncio
import signal
import time

import cv2
import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.support.images import encode, noise_image, png_declaring
from tests.conftest import start_server
from tests.support.faults import Faults, FaultSwitch

pytestmark = pytest.mark.server  # module-scoped real servers (markers: tests/conftest.py)

JPEG = {"content-type": "image/jpeg"}


def counter(server, family: str, **labels) -> float:
    text = httpx.get(f"{server.url}/metrics", timeout=30).text
    total = 0.0
    for fam in text_string_to_metric_families(text):
        if fam.name == family:
            for s in fam.samples:
                if s.name in (family, f"{family}_total") and all(s.labels.get(k) == v for k, v in labels.items()):
                    total += s.value
    return total


def detect_names(body: dict) -> list[str]:
    return sorted(d["class_name"] for d in body["detections"])


async def burst(url: str, payloads: list[bytes], path: str = "/detect", **kwargs) -> list[httpx.Response]:
    limits = httpx.Limits(max_connections=len(payloads) + 4, max_keepalive_connections=len(payloads) + 4)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as c:
        return await asyncio.gather(*(c.post(path, content=p, headers=JPEG, **kwargs) for p in payloads))


@pytest.fixture(scope="module")
def admission(tmp_path_factory, weights):
    """Small batches and a short deadline: overload, deadlines and expected-wait admission."""
    tmp = tmp_path_factory.mktemp("admission")
    switch = FaultSwitch(tmp / "faults.json")
    server = start_server(tmp, weights, faults=switch, max_batch_size=2, max_queue_delay_ms=5, request_timeout_s=4,
                          queue_size=16)
    server.faults = switch
    yield server
    server.stop()


@pytest.fixture(scope="module")
def batches(tmp_path_factory, weights):
    """Batches of up to 4 collected for 200 ms and a deadline that never refuses: batch faults."""
    tmp = tmp_path_factory.mktemp("batches")
    switch = FaultSwitch(tmp / "faults.json")
    server = start_server(tmp, weights, faults=switch, max_batch_size=4, max_queue_delay_ms=200, request_timeout_s=60)
    server.faults = switch
    yield server
    server.stop()


@pytest.fixture
def fault(request):
    """Switch the module server's fault for one test, and back to none afterwards."""
    servers = []

    def switch(server, faults: Faults):
        server.faults.set(faults)
        servers.append(server)
        return server

    yield switch
    for server in servers:
        server.faults.set(Faults())


def drained(server, timeout: float = 60.0) -> bool:
    """The backlog of a burst has been worked off: nothing queued, nothing in flight but this
    poll's own request (a fixed sleep is too short on a loaded CI machine)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if counter(server, "campusguard_queue_depth") == 0 and counter(server, "campusguard_in_flight_requests") <= 1:
            return True
        time.sleep(0.2)
    return False


def learn_rate(server, payload: bytes, n: int = 4) -> None:
    """A few frames at the current speed: the admission estimate learns it (no warm-up here)."""
    with server.client() as c:
        for _ in range(n):
            assert c.post("/detect", content=payload, headers=JPEG).status_code == 200


def test_overload_sheds_with_503_and_recovers(admission, fault, bus_jpg):
    with admission.client() as c:
        reference = c.post("/detect", content=bus_jpg, headers=JPEG).json()
    server = fault(admission, Faults(delay_ms=150))
    # a few frames at the slowed rate first, as in the burst test below: the module's server
    # may have learnt its estimate at full speed, and admitting at that rate would let a
    # slowed backlog run out of time (504) instead of being refused at the door (503)
    learn_rate(server, bus_jpg, 6)
    refused_before = counter(server, "campusguard_rejected_requests", reason="queue_full")
    expired_before = counter(server, "campusguard_rejected_requests", reason="deadline_exceeded")
    responses = asyncio.run(burst(server.url, [bus_jpg] * 64))
    codes = [r.status_code for r in responses]
    # as in the burst test below: a shared CI machine can slow a batch after its request was
    # admitted, so one or two may run out of time (504), counted as such, never the rule
    assert set(codes) <= {200, 503, 504} and codes.count(504) <= 2, codes
    assert codes.count(503) > 0 and codes.count(200) >= 1  # how many are admitted depends on the machine's load
    for r in responses:
        if r.status_code == 503:
            assert r.json()["error"] == "queue_full" and int(r.headers["retry-after"]) >= 1
        elif r.status_code == 504:
            assert r.json()["error"] == "deadline_exceeded"
        else:
            assert detect_names(r.json()) == detect_names(reference)
            got = [list(d["box"].values()) for d in r.json()["detections"]]
            want = [list(d["box"].values()) for d in reference["detections"]]
            np.testing.assert_allclose(got, want, atol=0.05)  # batched vs single: float noise only
    assert counter(server, "campusguard_rejected_requests", reason="queue_full") - refused_before == codes.count(503)
    assert counter(server, "campusguard_rejected_requests", reason="deadline_exceeded") - expired_before \
        == codes.count(504)
    assert httpx.get(f"{server.url}/health/ready").status_code == 200
    assert drained(server)
    with server.client() as c:
        assert c.post("/detect", content=bus_jpg, headers=JPEG).status_code == 200


def test_deadline_answers_504_without_inference(admission, fault, bus_jpg):
    """When the service-rate estimate is wrong (here: learnt at full speed, before the backend
    slows to 6 s a batch), admitted requests that miss their deadline get 504 and never
    reach the model."""
    learn_rate(admission, bus_jpg)
    server = fault(admission, Faults(delay_ms=6000))
    images_before = counter(server, "campusguard_images")
    expired_before = counter(server, "campusguard_rejected_requests", reason="deadline_exceeded")
    responses = asyncio.run(burst(server.url, [bus_jpg] * 6))
    codes = [r.status_code for r in responses]
    assert set(codes) <= {200, 503, 504} and 504 in codes and 200 in codes, codes
    assert all(r.json()["error"] == "deadline_exceeded" for r in responses if r.status_code == 504)
    # the expired requests never reached the backend: images inferred == answers given
    assert counter(server, "campusguard_images") - images_before == codes.count(200)
    assert counter(server, "campusguard_rejected_requests", reason="deadline_exceeded") - expired_before \
        == codes.count(504)


def test_burst_over_capacity_is_refused_at_once_and_the_admitted_finish_in_time(admission, fault, bus_jpg):
    """Expected-wait admission with the real model, slowed through the backend registry."""
    deadline = 4.0  # the server's request_timeout_s
    server = fault(admission, Faults(delay_ms=400))
    learn_rate(server, bus_jpg, 6)  # a few frames at the slowed rate: the estimate learns it
    expired_before = counter(server, "campusguard_rejected_requests", reason="deadline_exceeded")
    refused_before = counter(server, "campusguard_rejected_requests", reason="queue_full")

    async def timed(c: httpx.AsyncClient) -> tuple[httpx.Response, float]:
        start = time.perf_counter()
        r = await c.post("/detect", content=bus_jpg, headers=JPEG)
        return r, time.perf_counter() - start

    async def burst_timed(n: int) -> list[tuple[httpx.Response, float]]:
        limits = httpx.Limits(max_connections=n + 4, max_keepalive_connections=n + 4)
        async with httpx.AsyncClient(base_url=server.url, timeout=120, limits=limits) as c:
            return await asyncio.gather(*(timed(c) for _ in range(n)))

    over = asyncio.run(burst_timed(40))  # at most ~5 images/s for 4 s: far over capacity
    codes = [r.status_code for r, _ in over]
    # Refused at the door or answered; a shared CI machine can slow a batch after its
    # request was admitted, so one or two may still run out of time (504, at the deadline),
    # but expected-wait admission must keep that the exception, not the rule.
    assert {200, 503} <= set(codes) <= {200, 503, 504} and codes.count(504) <= 2, codes
    for r, elapsed in over:
        if r.status_code == 503:
            assert r.json()["error"] == "queue_full" and int(r.headers["retry-after"]) >= 1
            assert elapsed < deadline / 2, elapsed  # refused at the door, not after waiting for the deadline
        else:
            assert elapsed < deadline + 3.0, elapsed  # deadline + its own batch + HTTP slack (a second worker shares the CPU)
    assert max(int(r.headers["retry-after"]) for r, _ in over if r.status_code == 503) >= 1
    assert counter(server, "campusguard_rejected_requests", reason="deadline_exceeded") - expired_before \
        == codes.count(504)
    assert counter(server, "campusguard_rejected_requests", reason="queue_full") - refused_before == codes.count(503)

    assert drained(server)
    within = asyncio.run(burst_timed(2))
    assert [r.status_code for r, _ in within] == [200] * 2


def test_failing_batch_fails_only_its_requests(batches, fault, bus_jpg):
    server = fault(batches, Faults(fault="raise_once"))
    failed_before = counter(server, "campusguard_inference_errors", code="inference_failed")
    first = asyncio.run(burst(server.url, [bus_jpg] * 3))
    assert [r.status_code for r in first] == [500] * 3  # one batch, all three in it
    assert all(r.json()["error"] == "inference_failed" for r in first)
    after = asyncio.run(burst(server.url, [bus_jpg] * 3))
    assert [r.status_code for r in after] == [200] * 3
    assert counter(server, "campusguard_inference_errors", code="inference_failed") - failed_before == 1
    assert httpx.get(f"{server.url}/health/ready").status_code == 200


def test_oom_releases_cache_and_retries_smaller(batches, fault, bus_jpg):
    server = fault(batches, Faults(fault="oom_once"))
    clears_before = counter(server, "campusguard_cache_clears")
    retries_before = counter(server, "campusguard_oom_retries")
    batches_before = batch_count(server)
    responses = asyncio.run(burst(server.url, [bus_jpg] * 4))
    assert [r.status_code for r in responses] == [200] * 4
    assert len({tuple(detect_names(r.json())) for r in responses}) == 1
    assert counter(server, "campusguard_oom_retries") - retries_before == 1
    assert counter(server, "campusguard_cache_clears") == clears_before + 1
    # retried in halves: the batch-size histogram saw batches smaller than the one that failed
    assert batch_count(server) - batches_before >= 2


def batch_count(server) -> float:
    text = httpx.get(f"{server.url}/metrics").text
    fam = next(f for f in text_string_to_metric_families(text) if f.name == "campusguard_batch_size")
    return next(s.value for s in fam.samples if s.name == "campusguard_batch_size_count")


def test_crashed_worker_is_restarted(batches, fault, bus_jpg):
    server = fault(batches, Faults(fault="crash_worker"))
    restarts_before = counter(server, "campusguard_worker_restarts")
    with server.client() as c:
        crashed = c.post("/detect", content=bus_jpg, headers=JPEG)
        assert crashed.status_code == 500 and crashed.json()["error"] == "inference_failed"
        states, deadline = [], time.monotonic() + 30
        while time.monotonic() < deadline:
            states.append(c.get("/health/ready").status_code)
            if states[-1] == 200 and 503 in states:
                break
            time.sleep(0.05)
        assert 503 in states and states[-1] == 200, states
        assert c.post("/detect", content=bus_jpg, headers=JPEG).status_code == 200
    assert counter(server, "campusguard_worker_restarts") - restarts_before == 1


def test_watchdog_trips_on_hung_inference(server_factory, tmp_path, bus_jpg):
    switch = FaultSwitch(tmp_path / "faults.json")
    server = server_factory(faults=switch, inference_timeout_s=2)
    switch.set(Faults(fault="hang"))
    start = time.monotonic()
    responses = asyncio.run(burst(server.url, [bus_jpg] * 3))
    elapsed = time.monotonic() - start
    assert elapsed < 15, f"waiting requests were held {elapsed:.1f}s"
    assert [r.status_code for r in responses] == [503] * 3
    assert all(r.json()["error"] == "inference_timeout" for r in responses)
    ready = httpx.get(f"{server.url}/health/ready", timeout=5)
    assert ready.status_code == 503
    assert server.proc.wait(timeout=30) == 70  # exits non-zero so the orchestrator restarts it
    assert "hung device" in server.log()


def test_sigterm_drains_in_flight_requests(server_factory, tmp_path, bus_jpg):
    switch = FaultSwitch(tmp_path / "faults.json")
    server = server_factory(max_batch_size=2, faults=switch, drain_timeout_s=60, request_timeout_s=60)
    switch.set(Faults(delay_ms=300))

    async def scenario() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=server.url, timeout=60,
                                     limits=httpx.Limits(max_connections=16)) as c:
            tasks = [asyncio.create_task(c.post("/detect", content=bus_jpg, headers=JPEG)) for _ in range(8)]
            await asyncio.sleep(0.5)  # all accepted and queued; the first batches are running
            server.proc.send_signal(signal.SIGTERM)
            return await asyncio.gather(*tasks)

    responses = asyncio.run(scenario())
    assert [r.status_code for r in responses] == [200] * 8
    assert all(detect_names(r.json()) for r in responses)
    assert server.proc.wait(timeout=60) == 0
    assert "shut down cleanly" in server.log()


def test_cors_is_off_by_default(live_server):
    r = httpx.options(f"{live_server.url}/detect", headers={"Origin": "https://evil.example",
                                                            "Access-Control-Request-Method": "POST"})
    assert r.status_code == 405  # no CORS middleware: a preflight is just an OPTIONS the route does not take
    assert "access-control-allow-origin" not in {k.lower() for k in r.headers}


def _hostile_cases(bus_jpg: bytes) -> dict:
    rgba = cv2.cvtColor(noise_image(200, 150), cv2.COLOR_BGR2BGRA)
    return {
        "empty": dict(content=b"", headers=JPEG),
        "garbage": dict(content=np.random.default_rng(1).bytes(5000), headers=JPEG),
        "truncated_jpeg": dict(content=bus_jpg[:20000], headers=JPEG),
        "png_bomb": dict(content=png_declaring(50000, 50000), headers={"content-type": "image/png"}),
        "wrong_content_type": dict(content=bus_jpg, headers={"content-type": "text/plain"}),
        "no_image_field": dict(files={"file": ("a.jpg", bus_jpg, "image/jpeg")}),
        "image_as_text_field": dict(data={"image": "http://127.0.0.1:9/steal.jpg"}, files={"x": ("x", b"x")}),
        "conf_nan": dict(content=bus_jpg, headers=JPEG, params={"conf": "nan"}),
        "conf_text": dict(content=bus_jpg, headers=JPEG, params={"conf": "high"}),
        "conf_range": dict(content=bus_jpg, headers=JPEG, params={"conf": "-0.1"}),
        "iou_range": dict(content=bus_jpg, headers=JPEG, params={"iou": "7"}),
        "iou_text": dict(content=bus_jpg, headers=JPEG, params={"iou": "0.5;drop"}),
        "max_det_text": dict(content=bus_jpg, headers=JPEG, params={"max_det": "lots"}),
        "max_det_range": dict(content=bus_jpg, headers=JPEG, params={"max_det": "1000000"}),
        "unknown_class": dict(content=bus_jpg, headers=JPEG, params={"classes": "person,unicorn"}),
        "broken_multipart": dict(content=b"--xyz\r\nContent-Disposition: form-data; name=\"image\"\r\n\r\nabc",
                                 headers={"content-type": "multipart/form-data; boundary=xyz"}),
    }, {
        "one_pixel": dict(content=encode(noise_image(1, 1), ".png"), headers={"content-type": "image/png"}),
        "png16": dict(content=encode(noise_image(320, 200, dtype=np.uint16), ".png"), headers={"content-type": "image/png"}),
        "rgba": dict(content=encode(rgba, ".png"), headers={"content-type": "image/png"}),
        "gray": dict(content=encode(noise_image(300, 300, channels=1), ".jpg"), headers=JPEG),
    }


HOSTILE_EXPECTED = {
    "empty": (400, "invalid_image"), "garbage": (400, "invalid_image"), "truncated_jpeg": (400, "invalid_image"),
    "png_bomb": (413, "image_too_large"), "wrong_content_type": (415, "unsupported_media_type"),
    "no_image_field": (422, "missing_image"), "image_as_text_field": (422, "invalid_parameter"),
    "conf_nan": (422, "invalid_parameter"), "conf_text": (422, "invalid_parameter"),
    "conf_range": (422, "invalid_parameter"), "iou_range": (422, "invalid_parameter"),
    "iou_text": (422, "invalid_parameter"),
    "max_det_text": (422, "invalid_parameter"), "max_det_range": (422, "invalid_parameter"),
    "unknown_class": (422, "unknown_class"),
    # an unterminated multipart is either refused by the parser or yields no image part
    "broken_multipart": (422, {"invalid_multipart", "missing_image"}),
}


def test_hostile_inputs_each_followed_by_a_correct_detection(live_server, bus_jpg):
    bad, odd_but_valid = _hostile_cases(bus_jpg)
    with live_server.client() as c:
        reference = detect_names(c.post("/detect", content=bus_jpg, headers=JPEG).json())
        assert "bus" in reference and "person" in reference  # what this server finds; every answer below must match
        for name, kwargs in bad.items():
            r = c.post("/detect", **kwargs)
            status, codes = HOSTILE_EXPECTED[name]
            codes = codes if isinstance(codes, set) else {codes}
            assert r.status_code == status and r.json().get("error") in codes, (name, r.text)
            assert "Traceback" not in r.text
            assert detect_names(c.post("/detect", content=bus_jpg, headers=JPEG).json()) == reference, name
        for name, kwargs in odd_but_valid.items():
            r = c.post("/detect", **kwargs)
            assert r.status_code == 200, (name, r.text)
            assert detect_names(c.post("/detect", content=bus_jpg, headers=JPEG).json()) == reference, name
        img = cv2.imdecode(np.frombuffer(bus_jpg, np.uint8), cv2.IMREAD_COLOR)
        for name, kwargs in odd_but_valid.items():
            body = c.post("/detect", **kwargs).json()
            assert body["width"] >= 1 and body["height"] >= 1, name
        assert img is not None


def test_server_never_fetches_client_urls(live_server):
    """A URL in any field is data, never an address the server connects to."""
    import socket
    import threading

    hits = []
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(5)
    sock.settimeout(3)
    port = sock.getsockname()[1]

    def watch():
        try:
            conn, _ = sock.accept()
            hits.append(conn)
        except OSError:
            pass

    t = threading.Thread(target=watch)
    t.start()
    url = f"http://127.0.0.1:{port}/frame.jpg"
    with live_server.client() as c:
        attempts = [
            c.post("/detect", json={"url": url}),
            c.post("/detect", data={"image": url, "url": url}, files={"x": ("x", b"x")}),
            c.post("/v1/vision/detection", data={"image": url}, files={"x": ("x", b"x")}),
            c.post("/detect", content=url.encode(), headers=JPEG),
        ]
    t.join()
    sock.close()
    assert not hits, "the server connected to a client-supplied URL"
    assert all(r.status_code in (400, 415, 422) for r in attempts), [r.status_code for r in attempts]
