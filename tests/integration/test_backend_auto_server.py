"""The default service (BACKEND=auto, PRECISION=auto) as `make run` starts it: a real process resolves
the runtime for this machine, says so in its log and in /health, and answers with it."""

from __future__ import annotations

import pytest

from app.inference.backends.auto import resolve, system_probes
from tests.conftest import start_server, ultralytics_asset

pytestmark = pytest.mark.server


def test_default_server_resolves_auto_and_says_so(tmp_path, weights):
    expected = resolve("auto", "auto", "cpu", weights.suffix, system_probes())
    if expected.backend == "openvino":
        pytest.importorskip("openvino")
    # backend/precision "auto" are the Settings defaults; named here because the suite's own default pins torch
    server = start_server(tmp_path, weights, backend="auto", precision="auto", calibration_images=8)
    try:
        with server.client() as http:
            health = http.get("/health").json()
            reply = http.post("/detect", content=ultralytics_asset("bus.jpg").read_bytes(),
                              headers={"Content-Type": "image/jpeg"})
    finally:
        server.stop()
    assert health["backend_choice"] == {"backend": "auto", "precision": "auto",
                                        "resolved": f"{expected.backend} {expected.precision}", "reason": expected.reason}
    assert health["backend"] == expected.backend and health["precision_requested"] == expected.precision
    assert expected.precision != "int8"
    assert (f"backend {expected.backend}, precision {expected.precision} (CAMPUSGUARD_BACKEND=auto, "
            f"CAMPUSGUARD_PRECISION=auto): {expected.reason}") in server.log()
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["backend"] == expected.backend
    assert {d["class_name"] for d in body["detections"]} >= {"person", "bus"}
