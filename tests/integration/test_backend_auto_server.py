"""The default service (BACKEND=auto, PRECISION=auto) as `make run` starts it: a real process resolves
the runtime for this machine, says so in its log and in /health, and answers with it."""

from __future__ import annotations

from dataclasses import replace

import httpx
import pytest

from app.inference.backends.auto import resolve, system_probes
from tests.conftest import start_server, ultralytics_asset

pytestmark = pytest.mark.server


def health_and_detection(server) -> tuple[dict, httpx.Response, str]:
    """/health and a detection of bus.jpg from a started server, then its log once stopped."""
    try:
        with server.client() as http:
            health = http.get("/health").json()
            reply = http.post("/detect", content=ultralytics_asset("bus.jpg").read_bytes(),
                              headers={"Content-Type": "image/jpeg"})
    finally:
        server.stop()
    return health, reply, server.log()


def test_default_server_resolves_auto_and_says_so(tmp_path, weights):
    expected = resolve("auto", "auto", "cpu", weights.suffix, system_probes())
    if expected.backend == "openvino":
        pytest.importorskip("openvino")
    # backend/precision "auto" are the Settings defaults; named here because the suite's own default pins torch
    health, reply, log = health_and_detection(start_server(tmp_path, weights, backend="auto", precision="auto",
                                                           calibration_images=8))
    assert health["backend_choice"] == {"backend": "auto", "precision": "auto",
                                        "resolved": f"{expected.backend} {expected.precision}", "reason": expected.reason}
    assert health["backend"] == expected.backend and health["precision_requested"] == expected.precision
    assert expected.precision != "int8"
    assert (f"backend {expected.backend}, precision {expected.precision} (CAMPUSGUARD_BACKEND=auto, "
            f"CAMPUSGUARD_PRECISION=auto): {expected.reason}") in log
    assert reply.status_code == 200, reply.text
    body = reply.json()
    assert body["backend"] == expected.backend
    assert {d["class_name"] for d in body["detections"]} >= {"person", "bus"}


def test_a_broken_openvino_install_falls_back_to_the_next_choice(tmp_path, weights):
    """The default must not end a start on a broken optional runtime: an openvino whose import
    fails (here a stand-in package first on the path, as a wheel missing its shared library
    fails) is found by auto, fails to load, and the service serves the next choice, saying why."""
    pytest.importorskip("onnxruntime")
    broken = tmp_path / "site" / "openvino"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text(
        'raise ImportError("libopenvino.so.2540: cannot open shared object file: No such file or directory")\n')
    first = resolve("auto", "auto", "cpu", weights.suffix, replace(system_probes(), openvino=lambda: True))
    health, reply, log = health_and_detection(start_server(tmp_path, weights, backend="auto", precision="auto",
                                                           python_path=tmp_path / "site"))
    choice = health["backend_choice"]
    assert choice["resolved"] == "onnx fp32" and (choice["backend"], choice["precision"]) == ("auto", "auto"), choice
    assert choice["reason"].startswith(f"openvino {first.precision} failed to load (ConfigError: ") \
        and "libopenvino.so.2540" in choice["reason"] and choice["reason"].endswith(": onnx fp32, the next choice")
    assert health["backend"] == "onnx" and health["status"] == "ready"
    assert f"backend openvino, precision {first.precision} (CAMPUSGUARD_BACKEND=auto" in log
    assert "backend onnx: openvino" in log
    assert reply.status_code == 200 and reply.json()["backend"] == "onnx"
    assert {d["class_name"] for d in reply.json()["detections"]} >= {"person", "bus"}
