"""CAMPUSGUARD_PRECISION=int8: built from the weights, cached, locked, and always gated.

At imgsz 320 on 8 real COCO frames (accuracy is not the point; docs/benchmarks.md has the
640 figures). A bad int8 model (box decoding quantised, the measured recipe failure that
gives mAP 0) sits in the cache where the service looks for its int8 model: the gate must
refuse it, with labels (mAP) and without (F1 against fp32), and the server must serve fp32
and say so in /health, its log and a metric.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from pathlib import Path

import pytest

from app import wiring
from app.config import Settings
from app.inference.export import cached_export_path, export_onnx
from app.inference.precision.build import Int8Job, build_int8, int8_path
from app.inference.precision.quantize import Recipe
from tests.support.datasets import make_dataset
from tests.support.inprocess import wait_until_ready

pytestmark = pytest.mark.timeout(300)
IMGSZ = 320
BROKEN = Recipe(keep_fp32=())  # the box decoding quantised with the class scores: mAP 0


@pytest.fixture(scope="module")
def frames(dataset, tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("calib") / "frames", dataset, n=8)


def settings_for(weights: Path, cache: Path, frames: Path, **extra) -> Settings:
    return Settings(_env_file=None, weights=weights, backend="onnx", precision="int8", imgsz=IMGSZ, threads=2, warmup_iters=0,
                    onnx_cache_dir=cache, calibration_dir=frames, calibration_images=8, **extra)


@pytest.fixture(scope="module")
def broken_cache(weights, frames, tmp_path_factory) -> Path:
    """A data folder whose int8 model (at the path the service computes) is the broken one."""
    cache = tmp_path_factory.mktemp("cache")
    settings = settings_for(weights, cache, frames)
    options, precision = wiring.backend_options(settings), wiring.precision_options(settings)
    fp32 = export_onnx(weights, cached_export_path(weights, IMGSZ, False, cache), imgsz=IMGSZ, dynamic_batch=True,
                       threads=2)
    target = int8_path(cache, weights, (IMGSZ, IMGSZ), precision.calibration, precision.recipe)
    build_int8(Int8Job(fp32, (IMGSZ, IMGSZ), precision.calibration, BROKEN), target)
    assert options.all_shapes == ((IMGSZ, IMGSZ),)
    return cache


def test_unlabelled_gate_refuses_a_bad_int8_model(weights, broken_cache, frames, caplog):
    caplog.set_level(logging.INFO, logger="campusguard.precision")
    provisioned = wiring.provision_detector(settings_for(weights, broken_cache, frames))
    verdict = provisioned.verdict
    assert provisioned.fallback and provisioned.detector.precision == "fp32"
    assert verdict.mode == "unlabelled" and verdict.metric == "f1" and not verdict.passed
    assert verdict.value < 0.5 and verdict.threshold == 0.9 and verdict.images == 8
    assert "int8 gate FAILED: f1" in caplog.text and "serving fp32 instead" in caplog.text
    provisioned.detector.close()


def test_labelled_gate_compares_map_and_refuses(weights, broken_cache, frames, dataset):
    provisioned = wiring.provision_detector(settings_for(weights, broken_cache, frames, gate_dataset=frames))
    verdict = provisioned.verdict
    assert verdict.mode == "labelled" and verdict.metric == "map50_95_drop" and verdict.threshold == 0.01
    assert verdict.reference_map > 0.2 and verdict.candidate_map < 0.05 and not verdict.passed
    assert provisioned.detector.precision == "fp32"
    provisioned.detector.close()


def test_server_serves_fp32_and_says_so(weights, broken_cache, frames, bus_jpg, caplog):
    """/health, the log and campusguard_precision_fallback; detections still come (from fp32)."""
    from fastapi.testclient import TestClient

    from app.main import create_app

    caplog.set_level(logging.INFO)
    with TestClient(create_app(settings_for(weights, broken_cache, frames))) as client:
        wait_until_ready(client, 120, 0.2)
        health = client.get("/health").json()
        assert health["precision"] == "fp32" and health["precision_requested"] == "int8"
        assert health["precision_fallback"] is True
        assert health["precision_gate"]["passed"] is False and health["precision_gate"]["metric"] == "f1"
        assert "int8 gate FAILED" in health["precision_gate"]["summary"]
        metrics = client.get("/metrics").text
        assert 'campusguard_precision_fallback{requested="int8"} 1.0' in metrics
        assert 'campusguard_precision_gate_passed{metric="f1",precision="int8"} 0.0' in metrics
        response = client.post("/detect", files={"image": ("bus.jpg", bus_jpg, "image/jpeg")})
        assert response.status_code == 200 and response.json()["detections"]
    assert "serving fp32 instead" in caplog.text


def test_parity_refuses_the_int8_model_the_service_would_not_serve(broken_cache, frames, weights, tmp_path,
                                                                   monkeypatch, capsys):
    """`campusguard parity --precisions int8` gates like the service: a fallback to fp32 would
    compare fp32 with fp32, so it is an error (exit 2), and nothing is written."""
    from app.cli import main

    monkeypatch.setenv("CAMPUSGUARD_ONNX_CACHE_DIR", str(broken_cache))
    out = tmp_path / "int8.json"
    code = main(["parity", "--weights", str(weights), "--images", str(frames / "images"), "--imgsz", str(IMGSZ),
                 "--threads", "2", "--backend", "onnx", "--precisions", "int8", "--calibration", str(frames),
                 "--write-reference", str(out)])
    err = capsys.readouterr().err
    assert code == 2 and not out.exists()
    assert "int8 gate FAILED: f1" in err and "the service would serve fp32 instead" in err

def test_a_passing_int8_model_is_built_cached_and_reported(weights, frames, tmp_path, bus_jpg):
    """The default recipe, built from the .pt into the data folder; the gate (floor lowered:
    8 calibration frames at 320 are not a deployment) passes and int8 is what runs."""
    settings = settings_for(weights, tmp_path, frames, gate_min_f1=0.5)
    seen: list[str] = []
    provisioned = wiring.provision_detector(settings, seen.append)
    assert provisioned.detector.precision == "int8" and not provisioned.fallback and provisioned.verdict.passed
    report = provisioned.report()
    assert report["requested"] == report["served"] == "int8" and report["gate"]["threshold"] == 0.5
    built = list((tmp_path / "int8").glob("yolov8n-320-*.onnx"))
    assert len(built) == 1 and any("calibrating on 8/8 frames" in s for s in seen)
    assert any("gating int8" in s for s in seen)
    dets = wiring.build_pipeline(settings, provisioned.detector).detect([bus_jpg])[0]
    assert {"person", "bus"} <= {d.class_name for d in dets}
    provisioned.detector.close()
    again: list[str] = []  # the second replica finds the cached model: no calibration
    wiring.provision_detector(settings, again.append).detector.close()
    assert not any("calibrating" in s for s in again) and built[0].is_file()


def test_int8_without_calibration_frames_is_a_clear_error(weights, tmp_path):
    from app.core.errors import ConfigError

    with pytest.raises(ConfigError, match="CAMPUSGUARD_CALIBRATION_DIR, which is not a folder"):
        wiring.precision_options(settings_for(weights, tmp_path, tmp_path / "missing"))
