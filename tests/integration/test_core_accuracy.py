"""Accuracy of the detection core with the real yolov8n model, on both backends.

* bus.jpg: the right objects, boxes within 2 px of Ultralytics' own predict at the same
  fixed square letterbox (computed live here), and the README's published reference.
* `campusguard eval` (a real subprocess) on coco-val128: mAP50-95 near the reference on
  torch and onnx, and the two backends agree.
* Parity: detections of torch and onnx match one-to-one over all 128 images (from the two
  eval runs' `--save-predictions`, so the 128 images are inferred once per backend, not twice).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

from app.wiring import load_detector
from app.config import Settings
from app.inference.accuracy import load_dataset
from app.inference.pipeline import DetectParams, Pipeline
from tests.conftest import REPO, ultralytics_asset
from tests.support.detection_match import match_same_class

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

BACKENDS = ("torch", "onnx")
PREDICT = DetectParams(conf=0.25, iou=0.7)

# The published reference of models/README.md (ultralytics 8.4.190, CPU, conf=0.25):
# class, confidence, xyxy. It is an external reference, so it is hard-coded.
README_BUS = [
    ("person", 0.90, [50, 395, 248, 903]),
    ("person", 0.88, [670, 382, 810, 876]),
    ("bus", 0.87, [23, 228, 808, 755]),
    ("person", 0.86, [222, 405, 344, 858]),
    ("person", 0.27, [0, 550, 62, 875]),
]
README_MAP50_95 = 0.426


@pytest.fixture(scope="module")
def pipelines(weights, onnx_cache) -> dict[str, Pipeline]:
    """One pipeline per backend; the onnx one exports the .pt into the session cache."""
    out = {}
    for backend in BACKENDS:
        settings = Settings(_env_file=None, backend=backend, weights=weights, onnx_cache_dir=onnx_cache,
                            imgsz=640, device="cpu")
        out[backend] = Pipeline(load_detector(settings), cache_clear_every=0)
    yield out
    for pipe in out.values():
        pipe.detector.close()


@pytest.fixture(scope="module")
def ultralytics_bus(weights):
    """Ultralytics' own predict on bus.jpg at the fixed 640x640 square letterbox we use."""
    from ultralytics import YOLO

    result = YOLO(str(weights)).predict(str(ultralytics_asset("bus.jpg")), conf=0.25, rect=False,
                                        imgsz=640, device="cpu", verbose=False)[0]
    names = result.names
    return [(names[int(c)], float(s), b.tolist()) for b, s, c in
            zip(result.boxes.xyxy.cpu().numpy(), result.boxes.conf.cpu().numpy(), result.boxes.cls.cpu().numpy())]


def as_tuples(dets) -> list:
    return [(d.class_name, d.confidence, [d.x1, d.y1, d.x2, d.y2]) for d in dets]


@pytest.fixture(scope="module")
def bus_results(pipelines, bus_jpg) -> dict[str, list]:
    return {backend: as_tuples(pipe.detect([bus_jpg], PREDICT)[0]) for backend, pipe in pipelines.items()}


@pytest.mark.parametrize("backend", BACKENDS)
def test_bus_objects(bus_results, backend):
    counts = Counter(name for name, _, _ in bus_results[backend])
    assert counts == Counter({"person": 4, "bus": 1}), bus_results[backend]


@pytest.mark.parametrize("backend", BACKENDS)
def test_bus_boxes_match_ultralytics_predict(bus_results, ultralytics_bus, backend):
    ours = bus_results[backend]
    assert len(ours) == len(ultralytics_bus)
    pairs = match_same_class(ours, ultralytics_bus)
    assert len(pairs) == len(ours)
    for i, j, _ in pairs:
        diff = np.abs(np.array(ours[i][2]) - np.array(ultralytics_bus[j][2])).max()
        assert diff <= 2.0, f"{backend} {ours[i]} vs ultralytics {ultralytics_bus[j]}: {diff:.2f} px"
        assert abs(ours[i][1] - ultralytics_bus[j][1]) <= 0.02


@pytest.mark.parametrize("backend", BACKENDS)
def test_bus_matches_readme_reference(bus_results, backend):
    """Every README box is found by a same-class detection with IoU >= 0.85.

    Not within 2 px: the README was measured with Ultralytics' default *rectangular*
    letterbox (bus.jpg becomes 480x640, minimal padding), while this service letterboxes
    every frame to one fixed 640x640 square (fixed shapes bound the GPU allocator cache).
    A different input canvas shifts the network's outputs by up to ~15 px on the large bus
    box and moves the weakest person's score (0.27 there, ~0.37 here); that is a different
    but equally valid inference, so the external reference is checked by overlap.
    """
    ours = bus_results[backend]
    pairs = match_same_class(README_BUS, ours)
    matched = {i: iou for i, _, iou in pairs}
    for i, (name, _, box) in enumerate(README_BUS):
        assert matched.get(i, 0.0) >= 0.85, f"README {name} {box} not found by {backend}: {ours}"


@pytest.mark.parametrize("backend", BACKENDS)
def test_bus_within_2px_of_readme_at_its_fixed_shape(weights, onnx_cache, bus_jpg, backend):
    """With the fixed shape set to the reference's canvas (CAMPUSGUARD_IMGSZ=640x480, the
    rectangle Ultralytics chose for this portrait image), both backends reproduce the
    README's published boxes within 2 px, scores within 0.01, in the README's order."""
    settings = Settings(_env_file=None, backend=backend, weights=weights, onnx_cache_dir=onnx_cache,
                        imgsz="640x480", device="cpu")
    pipe = Pipeline(load_detector(settings), cache_clear_every=0)
    ours = as_tuples(pipe.detect([bus_jpg], PREDICT)[0])
    pipe.detector.close()
    assert [name for name, _, _ in ours] == [name for name, _, _ in README_BUS]
    for (name, score, box), (ref_name, ref_score, ref_box) in zip(ours, README_BUS):
        assert np.abs(np.array(box) - np.array(ref_box)).max() <= 2.0, (backend, box, ref_box)
        assert abs(score - ref_score) <= 0.01, (backend, name, score, ref_score)


# --- mAP through the real CLI ---------------------------------------------------------------

@pytest.fixture(scope="module")
def cli_eval(weights, dataset, onnx_cache, tmp_path_factory):
    """`campusguard eval --json` per backend, run once each (results cached per module)."""
    results: dict[str, dict] = {}

    def run(backend: str) -> dict:
        """The JSON summary, with the saved predictions under ``"predictions"``."""
        if backend not in results:
            env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPUSGUARD_")}
            env.update(YOLO_OFFLINE="1", CAMPUSGUARD_ONNX_CACHE_DIR=str(onnx_cache))
            cwd = tmp_path_factory.mktemp(f"eval-{backend}")
            proc = subprocess.run(
                [sys.executable, "-m", "app.cli", "eval", "--backend", backend, "--weights", str(weights),
                 "--data", str(dataset), "--json", "--no-progress", "--save-predictions", "predictions.json"],
                cwd=cwd, env={**env, "PYTHONPATH": str(REPO)},
                capture_output=True, text=True, timeout=600,
            )
            assert proc.returncode == 0, proc.stderr[-3000:]
            lines = proc.stdout.strip().splitlines()
            assert lines, f"no stdout; stderr: {proc.stderr[-2000:]}"
            results[backend] = json.loads(lines[-1])
            results[backend]["predictions"] = json.loads((cwd / "predictions.json").read_text())
        return results[backend]

    return run


@pytest.mark.parametrize("backend", BACKENDS)
def test_eval_cli_map(cli_eval, backend, dataset):
    summary = {k: v for k, v in cli_eval(backend).items() if k != "predictions"}
    print(summary)
    assert set(summary) == {"backend", "provider", "images", "map50_95", "map50", "precision", "decode", "per_shape"}
    assert summary["precision"] == "fp32" and summary["decode"] == "reduced" and summary["per_shape"] == {}
    assert summary["backend"] == backend
    assert summary["provider"] == ("CPUExecutionProvider" if backend == "onnx" else "torch-cpu")
    assert summary["images"] == len(load_dataset(dataset).images) == 128
    assert abs(summary["map50_95"] - README_MAP50_95) <= 0.01, summary
    assert summary["map50"] > summary["map50_95"]


def test_eval_cli_backends_agree(cli_eval):
    torch_map, onnx_map = cli_eval("torch")["map50_95"], cli_eval("onnx")["map50_95"]
    assert abs(torch_map - onnx_map) <= 0.005, (torch_map, onnx_map)


# --- parity over the dataset ----------------------------------------------------------------

def predicted(saved: dict, name: str, conf: float) -> list:
    """One image's saved eval predictions at ``conf`` or above, as (name, score, xyxy)."""
    return [(d["class_name"], d["confidence"], d["box"]) for d in saved["images"][name] if d["confidence"] >= conf]


def test_torch_onnx_parity_over_dataset(cli_eval, dataset):
    """Each backend's detections scoring 0.25 (the service's default conf) or more over the 128
    images, taken from its eval run: eval's multi-label output at conf 0.001 (as Ultralytics val),
    filtered at 0.25 (NMS keeps a box only against higher-scoring ones, so the filter keeps what a
    0.25 run of eval keeps). The service's single-label path is compared box by box on bus.jpg
    above and through the servers' tests; this compares the two backends' models over the set."""
    images = load_dataset(dataset).images
    saved = {b: cli_eval(b)["predictions"] for b in BACKENDS}
    assert all(len(saved[b]["images"]) == len(images) and saved[b]["backend"] == b for b in BACKENDS)
    per_backend = {b: [predicted(saved[b], p.name, PREDICT.conf) for p in images] for b in BACKENDS}
    n_torch = n_onnx = matched = 0
    worst = []
    for path, t_dets, o_dets in zip(images, per_backend["torch"], per_backend["onnx"]):
        n_torch += len(t_dets)
        n_onnx += len(o_dets)
        good = [p for p in match_same_class(t_dets, o_dets) if p[2] >= 0.98]
        matched += len(good)
        if len(good) < max(len(t_dets), len(o_dets)):
            worst.append((path.name, len(t_dets), len(o_dets), len(good)))
    print(f"parity: torch {n_torch}, onnx {n_onnx}, matched {matched}; imperfect images {worst}")
    assert n_torch > 500, n_torch  # the set really exercises the model (~800 at conf 0.25)
    assert matched / n_torch >= 0.99 and matched / n_onnx >= 0.99, (n_torch, n_onnx, matched, worst[:10])
