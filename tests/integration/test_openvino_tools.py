"""Every tool speaks openvino (issue #32, item 6): `campusguard eval`, `parity` and `bench`
take `--backend openvino` and its precisions, and CAMPUSGUARD_SHADOW_BACKEND=openvino runs
the shadow reference on OpenVINO.

In-process (``app.cli.main``) at imgsz 320 on a few coco-val128 images; the IR comes from the
session's shared cache (``openvino_cache``), so each is built once per test session. Accuracy
is not the point here (docs/benchmarks.md has the 640 figures).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.api.state import state_of
from app.cli import main
from app.config import Settings
from app.inference.precision.cpu import BF16_FLAGS, cpu_flags
from app.tooling.bench.table import NOT_AVAILABLE
from tests.support.datasets import make_dataset
from tests.support.shadow import real_shadow_app

pytest.importorskip("openvino")
pytestmark = pytest.mark.timeout(600)
IMGSZ = "320"
# bf16 runs only on CPUs with avx512_bf16 / amx_bf16; elsewhere each tool must refuse it clearly
HAS_BF16 = bool(set(BF16_FLAGS) & cpu_flags())
RUNNABLE = ("fp32", "bf16") if HAS_BF16 else ("fp32",)
BF16_REFUSAL = "bf16 needs a CPU with the avx512_bf16 (or amx_bf16) flag"


@pytest.fixture(scope="module")
def images8(dataset, tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("ov-tools") / "ds", dataset, n=8)


@pytest.fixture
def env(monkeypatch, openvino_cache, images8):
    """The CLI reads the cache and the calibration frames from the environment, as in production."""
    for key in ("CAMPUSGUARD_BACKEND", "CAMPUSGUARD_PRECISION", "CAMPUSGUARD_SHAPES", "CAMPUSGUARD_GATE_DATASET"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("CAMPUSGUARD_ONNX_CACHE_DIR", str(openvino_cache))
    monkeypatch.setenv("CAMPUSGUARD_CALIBRATION_DIR", str(images8))
    monkeypatch.setenv("CAMPUSGUARD_CALIBRATION_IMAGES", "8")
    monkeypatch.setenv("YOLO_OFFLINE", "1")


def test_eval_with_openvino_fp32_and_bf16(env, weights, images8, capsys):
    scores = {}
    for precision in ("fp32", "bf16"):
        rc = main(["eval", "--backend", "openvino", "--precision", precision, "--weights", str(weights),
                   "--imgsz", IMGSZ, "--threads", "2", "--data", str(images8), "--json", "--no-progress"])
        captured = capsys.readouterr()
        if precision not in RUNNABLE:  # this CPU has no bf16: a clear refusal, exit 2, no score
            assert rc == 2 and BF16_REFUSAL in captured.err, captured.err[-2000:]
            continue
        assert rc == 0
        summary = json.loads(captured.out.strip().splitlines()[-1])
        assert summary["backend"] == "openvino" and summary["precision"] == precision and summary["images"] == 8
        scores[precision] = summary["map50_95"]
    assert scores["fp32"] > 0.3 and abs(scores.get("bf16", scores["fp32"]) - scores["fp32"]) < 0.03, scores


def test_parity_openvino_against_a_torch_reference(env, weights, images8, tmp_path, capsys):
    reference = tmp_path / "ref.json"
    common = ["--weights", str(weights), "--images", str(images8 / "images"), "--imgsz", IMGSZ, "--threads", "2"]
    assert main(["parity", *common, "--write-reference", str(reference)]) == 0
    assert json.loads(reference.read_text())["meta"]["backend"] == "torch"
    rc = main(["parity", *common, "--reference", str(reference), "--backend", "openvino",
               "--precisions", ",".join(RUNNABLE), "--out", str(tmp_path / "out"), "--min-recall", "0.9",
               "--min-precision", "0.9"])
    rows = json.loads((tmp_path / "out" / "parity.json").read_text())["rows"]
    assert rc == 0, rows
    assert [(r["backend"], r["precision"]) for r in rows] == [("openvino", p) for p in RUNNABLE]
    assert rows[0]["reference_boxes"] > 20 and rows[0]["recall"] >= 0.95 and rows[0]["box_precision"] >= 0.95
    assert "| openvino | fp32 |" in capsys.readouterr().out


def test_parity_refuses_a_precision_it_does_not_know(env, weights, images8, tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["parity", "--weights", str(weights), "--images", str(images8), "--reference", str(tmp_path / "r.json"),
              "--backend", "openvino", "--precisions", "fp8"])
    assert exc.value.code == 2


def test_bench_rows_for_openvino_precisions(env, weights, dataset, openvino_cache, tmp_path):
    out = tmp_path / "bench"
    rc = main(["bench", "--backends", "openvino", "--sizes", "n", "--weights", f"n={weights}", "--precisions",
               "fp32,bf16", "--references", "raw", "--batches", "1,2", "--iterations", "2", "--warmup", "1",
               "--imgsz", IMGSZ, "--threads", "2", "--images", str(dataset / "images"), "--max-images", "4",
               "--onnx-cache-dir", str(openvino_cache), "--out", str(out), "--no-progress", "--no-plots"])
    assert rc == 0
    rows = json.loads((out / "bench.json").read_text())["rows"]
    ok = [r for r in rows if r["status"] == "ok"]
    assert {(r["kind"], r["backend"], r["precision"], r["batch"]) for r in ok} == {
        (k, "openvino", p, b) for k in ("raw", "library") for p in RUNNABLE for b in (1, 2)}
    assert all(r["fps"] > 0 for r in ok)
    providers = {"fp32": "openvino-cpu-f32", "bf16": "openvino-cpu-bf16"}
    assert {r["provider"] for r in ok} == {providers[p] for p in RUNNABLE}
    refused = [r for r in rows if r["status"] != "ok"]
    if not HAS_BF16:  # the bf16 rows cannot run here: one row says why, the fp32 rows are kept
        assert refused and all(r["precision"] == "bf16" and r["status"].startswith(NOT_AVAILABLE)
                               and BF16_REFUSAL in r["status"] for r in refused), refused
    else:
        assert refused == []


def test_bench_sweeps_requests_in_flight(env, weights, dataset, openvino_cache, tmp_path, capsys):
    """`bench --stage inflight`: 1 .. cores and auto, for onnx and openvino; the mechanics only
    (two short rounds: the figures are docs/benchmarks.md's)."""
    import os

    out = tmp_path / "inflight"
    rc = main(["bench", "--stage", "inflight", "--inflight-variants", "onnx:fp32,openvino:fp32", "--weights",
               f"n={weights}", "--imgsz", IMGSZ, "--images", str(dataset / "images"), "--clients", "3",
               "--stage-seconds", "2", "--rounds", "2", "--onnx-cache-dir", str(openvino_cache), "--out", str(out),
               "--no-progress"])
    assert rc == 0
    data = json.loads((out / "stage-inflight.json").read_text())
    cores = os.cpu_count() or 1
    assert [row["variant"] for row in data["sweep"]] == ["onnx:fp32", "openvino:fp32"]
    for row in data["sweep"]:
        assert set(row["img_s"]) == {str(c) for c in range(1, cores + 1)} | {"auto"}
        assert all(rate > 0 for rate in row["img_s"].values()) and row["vs_one"]["1"] == 1.0
        assert row["batch"] == 3 and isinstance(row["auto_not_slower"], bool)
    assert data["sweep"][0]["auto_count"] == cores and data["sweep"][1]["auto_count"] >= 1  # ORT: per thread
    assert data["meta"]["load_average_start"] and "auto picks" in capsys.readouterr().out


def test_shadow_reference_on_openvino(weights, onnx_cache, openvino_cache, dataset, monkeypatch):
    """An onnx primary shadowed by an OpenVINO fp32 reference (the same weights): they agree."""
    from dataclasses import replace

    from app.wiring import shadow

    monkeypatch.setattr(shadow, "reference_options", lambda s, *a, _f=shadow.reference_options: replace(
        _f(s, *a), onnx_cache_dir=openvino_cache))  # the primary's exports in one cache, the IR from the shared one
    settings = Settings(_env_file=None, backend="onnx", weights=weights, imgsz=int(IMGSZ), threads=1,
                        preprocess_workers=1, warmup_iters=0, onnx_cache_dir=onnx_cache, shadow_backend="openvino")
    frames = sorted((dataset / "images").glob("*.jpg"))[:4]
    with real_shadow_app(settings) as app_env:
        for path in frames:
            r = app_env.client.post("/detect?camera_id=cam-ov", content=path.read_bytes(),
                                    headers={"content-type": "image/jpeg"})
            assert r.status_code == 200, r.text
        assert state_of(app_env.app).shadow.get().drain(120)
        status = app_env.client.get("/status").json()["shadow"]
    assert status["reference"]["backend"] == "openvino" and status["reference"]["precision"] == "fp32"
    assert status["compared"] == 4 and status["overall"]["agreement"] >= 0.9


def test_shadow_openvino_refuses_an_onnx_reference_and_a_gpu(weights, tmp_path):
    from app import wiring
    from app.core.errors import ConfigError

    onnx = tmp_path / "m.onnx"
    onnx.write_bytes(b"x")
    with pytest.raises(ConfigError, match="SHADOW_BACKEND=openvino cannot load"):
        wiring.check_shadow(Settings(_env_file=None, weights=weights, shadow_backend="openvino", shadow_weights=onnx))
    with pytest.raises(ConfigError, match="runs on the CPU only"):
        wiring.check_shadow(Settings(_env_file=None, weights=weights, shadow_backend="openvino",
                                     shadow_device="cuda:0"))
