"""The precision table, one int8 build at a time across replicas, and readiness that says
what it is waiting for (in-process; the real build and gate are in
tests/integration/test_precision_gate.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from app.api.state import state_of
from app.core.errors import ConfigError
from app.core.progress import StartupProgress
from app.inference.precision import build
from app.inference.precision.gate import GateVerdict
from app.inference.precision.spec import SUPPORT, check_precision, min_f1
from tests.support.inprocess import inprocess_app


def test_precision_table_names_where_a_precision_runs():
    check_precision("onnx", "cpu", "int8")
    check_precision("torch", "cuda:0", "fp16")
    with pytest.raises(ConfigError, match="int8 does not run on backend torch with device cpu; it runs on onnx on CPU"):
        check_precision("torch", "cpu", "int8")
    with pytest.raises(ConfigError, match="unknown precision 'int4'"):
        check_precision("onnx", "cpu", "int4")
    assert set(SUPPORT) == {"torch", "onnx", "openvino"}
    assert min_f1("int8") == 0.90 and min_f1("fp16") == 0.97 and min_f1("bf16") == 0.97 and min_f1("int8", 0.8) == 0.8


def test_one_build_at_a_time_across_replicas(tmp_path, monkeypatch):
    """Two replicas start together: one calibrates, the other waits on the lock (saying so)
    and then loads the file the first one wrote."""
    calls: list[str] = []

    def fake_quantize(fp32, out, reader, recipe):
        calls.append(threading.current_thread().name)
        time.sleep(0.6)
        Path(out).write_bytes(b"int8")

    monkeypatch.setattr(build, "quantize", fake_quantize)
    monkeypatch.setattr(build, "inspect_yolo_onnx", lambda path: type("M", (), {"input_name": "images", "batch": None}))
    monkeypatch.setattr(build, "letterboxed_frames", lambda images, shape, progress=False: [])
    monkeypatch.setattr(build, "LOCK_POLL_S", 0.1)
    target = tmp_path / "int8" / "model.onnx"
    job = build.Int8Job(tmp_path / "fp32.onnx", (320, 320), ())
    notes: dict[str, list[str]] = {"a": [], "b": []}
    threads = [threading.Thread(target=build.build_int8, args=(job, target, notes[n].append), name=n) for n in "ab"]
    for t in threads:
        t.start()
        time.sleep(0.1)
    for t in threads:
        t.join()
    assert calls == ["a"] and target.read_bytes() == b"int8"
    assert any("waiting for another replica's int8 build" in n for n in notes["b"])
    assert not list(target.parent.glob("*.tmp.onnx"))


def test_gate_verdict_summary():
    verdict = GateVerdict("int8", False, "labelled", "map50_95_drop", 0.031, 0.01, 128, 0.4231, 0.392)
    assert verdict.summary == ("int8 gate FAILED: map50_95_drop 0.0310 (fp32 0.4231, int8 0.3920), needs <= 0.01, "
                               "labelled, 128 images")
    assert verdict.as_dict()["passed"] is False


def test_readiness_says_what_it_is_waiting_for():
    with inprocess_app(ready=False) as ip:
        progress: StartupProgress = state_of(ip.app).progress
        progress.set("loading", "building the int8 model 1/2 (384x640): calibrating on 40/64 frames")
        health = ip.client.get("/health").json()
        assert health["status"] == "loading" and not health["ready"]
        assert "calibrating on 40/64 frames" in health["phase_detail"]
        ready = ip.client.get("/health/ready")
        assert ready.status_code == 503 and "calibrating on 40/64 frames" in ready.json()["message"]
        detect = ip.client.post("/detect", content=b"x", headers={"Content-Type": "image/jpeg"})
        assert detect.status_code == 503 and "GET /health says what it is doing" in detect.json()["message"]


def test_health_reports_the_precision_and_shapes():
    with inprocess_app() as ip:
        health = ip.client.get("/health").json()
        assert health["precision"] == "fp32" and health["shapes"] == ["64x64"]
        assert health["phase_detail"] is None


def test_shapes_auto_follow_the_site_files_cameras():
    """SHAPES=auto: IMGSZ plus the aspect class of every camera resolution of the site file."""
    from app import wiring
    from app.config import Settings

    repo = Path(__file__).resolve().parents[2]
    settings = Settings(_env_file=None, shapes="auto", site_config=repo / "deploy/site.example.yaml")
    assert wiring.site_resolutions(settings) == [(1920, 1080), (1280, 720)]
    assert wiring.backend_options(settings).all_shapes == ((640, 640), (384, 640))
    assert wiring.backend_options(Settings(_env_file=None, shapes="auto")).all_shapes == ((640, 640),)
