"""The HTTP service against a real uvicorn process with the real model (issue: HTTP service)."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from openapi_spec_validator import validate
from prometheus_client.parser import text_string_to_metric_families

from tests.support.images import encode, noise_image
from tests.conftest import start_server
from tests.support.faults import Faults, FaultSwitch



@pytest.fixture(scope="module")
def live_server(tmp_path_factory, weights):
    """The real model at 640: these tests check what it finds on bus.jpg (accuracy is the point).
    One warm-up inference: a burst of 16 is the first thing one test sends, and the admission
    estimate must not come from a cold first batch. A 60 s deadline: these tests are about
    answers and batching, not admission (tests/integration/test_reliability.py), and a shared
    CI machine can make 16 frames at 640 look more than 10 s of work."""
    server = start_server(tmp_path_factory.mktemp("live640"), weights, imgsz=640, warmup_iters=1, request_timeout_s=60)
    yield server
    server.stop()


EXPECTED_FAMILIES = {
    "campusguard_requests", "campusguard_request_duration_seconds", "campusguard_stage_duration_seconds",
    "campusguard_batch_size", "campusguard_queue_depth", "campusguard_inferences", "campusguard_cache_clears",
    "campusguard_detections", "campusguard_camera_detections", "campusguard_device_memory_used_bytes",
    "campusguard_device_memory_reserved_bytes", "campusguard_device_memory_total_bytes", "campusguard_build_info",
    "campusguard_process_resident_memory_bytes", "campusguard_ready", "campusguard_rejected_requests",
}


def classes_of(body: dict) -> list[str]:
    return sorted(d["class_name"] for d in body["detections"])


def families(text: str) -> dict:
    return {f.name: f for f in text_string_to_metric_families(text)}


def test_bus_on_detect(live_server, bus_jpg):
    with live_server.client() as c:
        r = c.post("/detect", files={"image": ("bus.jpg", bus_jpg, "image/jpeg")})
    assert r.status_code == 200, r.text
    body = r.json()
    assert (body["width"], body["height"]) == (810, 1080)
    assert classes_of(body) == ["bus", "person", "person", "person", "person"]
    assert body["backend"] == "torch" and body["model"] == "yolov8n" and body["provider"] == "torch-cpu"
    for det in body["detections"]:
        box = det["box"]
        assert 0 <= box["x1"] < box["x2"] <= 810 and 0 <= box["y1"] < box["y2"] <= 1080
    assert set(body["timings"]) == {"decode_ms", "queue_wait_ms", "preprocess_ms", "inference_ms", "postprocess_ms",
                                    "total_ms"}
    assert body["timings"]["inference_ms"] > 0


def test_bus_as_raw_body_with_overrides(live_server, bus_jpg):
    with live_server.client() as c:
        r = c.post("/detect", content=bus_jpg, headers={"content-type": "image/jpeg"},
                   params={"classes": "bus,0", "conf": 0.5, "camera_id": "gate-1"})
        only_bus = c.post("/detect", content=bus_jpg, headers={"content-type": "image/jpeg"},
                          params={"classes": "bus"})
        capped = c.post("/detect", content=bus_jpg, headers={"content-type": "image/jpeg"}, params={"max_det": 2})
    assert r.status_code == 200, r.text
    assert classes_of(r.json()) == ["bus", "person", "person", "person"]  # the 0.37 person is below conf 0.5
    assert r.json()["camera_id"] == "gate-1"
    assert classes_of(only_bus.json()) == ["bus"]
    assert len(capped.json()["detections"]) == 2


def test_bus_on_deepstack_route(live_server, bus_jpg):
    with live_server.client() as c:
        r = c.post("/v1/vision/detection", files={"image": ("bus.jpg", bus_jpg, "image/jpeg")},
                   data={"min_confidence": "0.25"})
        default = c.post("/v1/vision/detection", files={"image": ("bus.jpg", bus_jpg, "image/jpeg")})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["success"] is True and body["code"] == 200
    assert sorted(p["label"] for p in body["predictions"]) == ["bus", "person", "person", "person", "person"]
    assert body["count"] == 5
    for p in body["predictions"]:
        assert all(isinstance(p[k], int) for k in ("x_min", "y_min", "x_max", "y_max"))
        assert 0 <= p["x_min"] < p["x_max"] <= 810
    for key in ("duration", "inferenceMs", "processMs", "message"):
        assert key in body
    # DeepStack's default min_confidence is 0.40: the 0.37 person is dropped
    assert all(p["confidence"] >= 0.40 for p in default.json()["predictions"])
    assert default.json()["count"] == 4


def test_deepstack_errors(live_server, bus_jpg):
    with live_server.client() as c:
        garbage = c.post("/v1/vision/detection", files={"image": ("x.jpg", b"not an image", "image/jpeg")})
        nan = c.post("/v1/vision/detection", files={"image": ("b.jpg", bus_jpg, "image/jpeg")},
                     data={"min_confidence": "abc"})
        high = c.post("/v1/vision/detection", files={"image": ("b.jpg", bus_jpg, "image/jpeg")},
                      data={"min_confidence": "1.5"})
    for r in (nan, high):
        assert r.status_code == 400 and r.json()["success"] is False and "min_confidence" in r.json()["error"]
    assert garbage.status_code in (400, 415) and garbage.json()["success"] is False


def test_concurrent_requests_are_batched(live_server, bus_jpg, zidane_jpg):
    async def burst() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=live_server.url, timeout=120,
                                     limits=httpx.Limits(max_connections=32)) as c:
            images = [bus_jpg, zidane_jpg] * 8
            return await asyncio.gather(*(c.post("/detect", files={"image": ("f.jpg", img, "image/jpeg")})
                                          for img in images))

    responses = asyncio.run(burst())
    assert [r.status_code for r in responses] == [200] * 16
    assert all(classes_of(r.json()) == ["bus", "person", "person", "person", "person"] for r in responses[::2])
    with live_server.client() as c:
        fams = families(c.get("/metrics").text)
    samples = {(s.name, s.labels.get("le")): s.value for s in fams["campusguard_batch_size"].samples}
    total, singles = samples[("campusguard_batch_size_count", None)], samples[("campusguard_batch_size_bucket", "1.0")]
    assert total - singles > 0, "no batch larger than 1 was formed"


def test_metrics_families_and_format(live_server, bus_jpg):
    with live_server.client() as c:
        c.post("/detect", files={"image": ("b.jpg", bus_jpg, "image/jpeg")}, params={"camera_id": "cam-7"})
        c.post("/detect", content=b"garbage", headers={"content-type": "image/jpeg"})
        r = c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    fams = families(r.text)
    missing = EXPECTED_FAMILIES - set(fams)
    assert not missing, f"missing metric families: {sorted(missing)}"
    stages = {s.labels["stage"] for s in fams["campusguard_stage_duration_seconds"].samples}
    assert stages == {"decode", "queue_wait", "preprocess", "inference", "postprocess"}
    buckets = sorted(float(s.labels["le"]) for s in fams["campusguard_request_duration_seconds"].samples
                     if s.name.endswith("_bucket") and s.labels["le"] != "+Inf")
    assert buckets[0] == 0.001 and buckets[-1] == 10.0
    statuses = {(s.labels["route"], s.labels["status"]) for s in fams["campusguard_requests"].samples
                if s.name == "campusguard_requests_total"}
    assert ("/detect", "200") in statuses and ("/detect", "400") in statuses
    cams = {s.labels["camera_id"] for s in fams["campusguard_camera_detections"].samples}
    assert "cam-7" in cams
    info = [s for s in fams["campusguard_build_info"].samples][0].labels
    assert info["backend"] == "torch" and info["model"] == "yolov8n" and info["precision"] == "fp32"
    mem = [s for s in fams["campusguard_device_memory_used_bytes"].samples if s.labels["device"] == "cpu"]
    assert mem and mem[0].value > 50e6  # RSS of a process holding torch and a model


def test_openapi_validates_and_lists_routes(live_server):
    with live_server.client() as c:
        spec = c.get("/openapi.json").json()
        docs = c.get("/docs")
    validate(spec)
    assert docs.status_code == 200
    routes = {(path, method) for path, ops in spec["paths"].items() for method in ops}
    for route in [("/detect", "post"), ("/detect/batch", "post"), ("/v1/vision/detection", "post"),
                  ("/health/live", "get"), ("/health/ready", "get"), ("/health", "get"), ("/metrics", "get")]:
        assert route in routes
    assert "multipart/form-data" in spec["paths"]["/detect"]["post"]["requestBody"]["content"]


def test_batch_endpoint_isolates_bad_items(live_server, bus_jpg, zidane_jpg):
    files = [("images", ("a.jpg", bus_jpg, "image/jpeg")), ("images", ("bad.jpg", b"\xff\xd8\xffjunk", "image/jpeg")),
             ("images", ("c.jpg", zidane_jpg, "image/jpeg"))]
    with live_server.client() as c:
        r = c.post("/detect/batch", files=files)
    assert r.status_code == 200, r.text
    results = r.json()["results"]
    assert [i["ok"] for i in results] == [True, False, True]
    assert classes_of(results[0]["result"]) == ["bus", "person", "person", "person", "person"]
    assert results[1]["error"]["error"] == "invalid_image"
    assert "person" in classes_of(results[2]["result"])


@pytest.mark.parametrize("case", ["garbage", "gif", "truncated", "unsupported_type", "no_content_type", "bad_conf",
                                  "bad_iou", "bad_max_det", "unknown_class", "bad_camera", "missing_field"])
def test_error_cases_then_still_serving(live_server, bus_jpg, case):
    expected = {"garbage": (400, "invalid_image"), "gif": (415, "unsupported_media_type"), "truncated": (400, "invalid_image"),
                "unsupported_type": (415, "unsupported_media_type"), "no_content_type": (415, "unsupported_media_type"),
                "bad_conf": (422, "invalid_parameter"), "bad_iou": (422, "invalid_parameter"),
                "bad_max_det": (422, "invalid_parameter"), "unknown_class": (422, "unknown_class"),
                "bad_camera": (422, "invalid_parameter"), "missing_field": (422, "missing_image")}[case]
    with live_server.client() as c:
        jpeg = {"content-type": "image/jpeg"}
        r = {
            "garbage": lambda: c.post("/detect", content=b"\x00garbage" * 100, headers=jpeg),
            "gif": lambda: c.post("/detect", content=b"GIF89a\x01\x00\x01\x00" + bytes(40), headers=jpeg),
            "truncated": lambda: c.post("/detect", content=bus_jpg[: len(bus_jpg) // 2], headers=jpeg),
            "unsupported_type": lambda: c.post("/detect", json={"url": "http://127.0.0.1:1/x.jpg"}),
            "no_content_type": lambda: c.post("/detect", content=bus_jpg, headers={"content-type": ""}),
            "bad_conf": lambda: c.post("/detect", content=bus_jpg, headers=jpeg, params={"conf": "abc"}),
            "bad_iou": lambda: c.post("/detect", content=bus_jpg, headers=jpeg, params={"iou": "1.5"}),
            "bad_max_det": lambda: c.post("/detect", content=bus_jpg, headers=jpeg, params={"max_det": "0"}),
            "unknown_class": lambda: c.post("/detect", content=bus_jpg, headers=jpeg, params={"classes": "dragon"}),
            "bad_camera": lambda: c.post("/detect", content=bus_jpg, headers=jpeg, params={"camera_id": "a b/../"}),
            "missing_field": lambda: c.post("/detect", files={"other": ("b.jpg", bus_jpg, "image/jpeg")}),
        }[case]()
        assert (r.status_code, r.json()["error"]) == expected, r.text
        assert r.json()["message"] and "Traceback" not in r.text
        ok = c.post("/detect", files={"image": ("bus.jpg", bus_jpg, "image/jpeg")})
    assert ok.status_code == 200 and classes_of(ok.json()) == ["bus", "person", "person", "person", "person"]


def test_body_limit_with_and_without_content_length(server_factory, bus_jpg):
    server = server_factory(imgsz=320, max_body_bytes=100_000)
    big = bus_jpg * 2 + b"\x00" * 100_000

    def chunks():
        for start in range(0, len(big), 16384):
            yield big[start:start + 16384]

    with server.client() as c:
        declared = c.post("/detect", content=big, headers={"content-type": "image/jpeg"})
        streamed = c.post("/detect", content=chunks(), headers={"content-type": "image/jpeg"})
        multipart = c.post("/detect", files={"image": ("big.jpg", big, "image/jpeg")})
    for r in (declared, streamed, multipart):
        assert r.status_code == 413 and r.json()["error"] == "payload_too_large", r.text
    assert "content-length" not in {k.lower() for k in streamed.request.headers}
    with server.client() as c:
        small = noise_image(320, 240)
        assert c.post("/detect", content=encode(small), headers={"content-type": "image/jpeg"}).status_code == 200
        fams = families(c.get("/metrics").text)
    rejected = {s.labels["reason"]: s.value for s in fams["campusguard_rejected_requests"].samples
                if s.name.endswith("_total")}
    assert rejected["payload_too_large"] == 3


def test_readiness_is_503_until_warm(server_factory):
    server = server_factory(wait=False, warmup_iters=6)
    seen = []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            live = httpx.get(f"{server.url}/health/live", timeout=2)
            ready = httpx.get(f"{server.url}/health/ready", timeout=2)
        except httpx.HTTPError:
            time.sleep(0.05)
            continue
        assert live.status_code == 200
        seen.append(ready.status_code)
        if ready.status_code == 200:
            break
        assert ready.headers.get("retry-after") and ready.json()["error"] == "not_ready"
        time.sleep(0.05)
    assert seen and seen[0] == 503 and seen[-1] == 200, seen
    # a detection sent before readiness would have been refused with 503 + Retry-After; now it works
    assert httpx.post(f"{server.url}/detect", content=encode(noise_image(64, 64)),
                      headers={"content-type": "image/jpeg"}, timeout=60).status_code == 200


def test_not_ready_detect_is_503(server_factory):
    server = server_factory(wait=False, warmup_iters=40)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            r = httpx.post(f"{server.url}/detect", content=encode(noise_image(64, 64)),
                           headers={"content-type": "image/jpeg"}, timeout=10)
            break
        except httpx.HTTPError:
            time.sleep(0.05)
    assert r.status_code == 503 and r.json()["error"] == "not_ready" and int(r.headers["retry-after"]) >= 1


def test_injected_backend_failure_is_500_without_trace(server_factory, tmp_path, bus_jpg):
    switch = FaultSwitch(tmp_path / "faults.json")
    server = server_factory(faults=switch)
    switch.set(Faults(fault="raise_once"))
    with server.client() as c:
        failed = c.post("/detect", content=bus_jpg, headers={"content-type": "image/jpeg"})
        after = c.post("/detect", content=bus_jpg, headers={"content-type": "image/jpeg"})
    assert failed.status_code == 500 and failed.json()["error"] == "inference_failed"
    assert "Traceback" not in failed.text and "injected" not in failed.text
    assert after.status_code == 200


def test_json_logs_one_line_per_request(server_factory, bus_jpg):
    import json

    server = server_factory(imgsz=320, log_format="json", api_keys="secret-key-1")
    with server.client() as c:
        c.post("/detect", content=bus_jpg, headers={"content-type": "image/jpeg", "x-api-key": "secret-key-1"},
               params={"camera_id": "north-gate"})
    time.sleep(0.5)
    lines = [json.loads(line) for line in server.log().splitlines() if line.startswith("{")]
    access = [e for e in lines if e.get("logger") == "campusguard.access" and e.get("route") == "/detect"]
    assert len(access) == 1
    entry = access[0]
    assert entry["status"] == 200 and entry["camera_id"] == "north-gate" and entry["detections"] >= 1
    assert entry["latency_ms"] > 0
    assert "secret-key-1" not in server.log()
