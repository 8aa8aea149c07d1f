"""The shadow lane against an int8 primary, provisioned as the service provisions it.

The app runs its own lifespan in-process (no socket): ``load_engine`` builds the int8 model
from the .pt (calibrated on 8 coco-val128 frames, cached), gates it against fp32, serves it,
then loads the torch fp32 reference (``CAMPUSGUARD_SHADOW_BACKEND=torch``) with every frame
sampled. Hold-out frames (none of them a calibration frame) come from three cameras. The
agreement the service reports per camera and overall (``GET /status`` and ``/metrics``) must
equal the F1 of `campusguard parity`'s recall and precision on the same frames, with the same
int8 model against the same fp32 reference, within 0.01.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from app.api.state import state_of
from app.cli import main
from app.config import Settings
from app.inference.shadow.book import ALERT_BELOW
from app.main import create_app
from app.tooling.bench.parity import compare
from tests.support.datasets import make_dataset
from tests.support.inprocess import wait_until_ready

pytestmark = pytest.mark.timeout(300)
IMGSZ = 320
CALIBRATION = 8
CAMERAS = ("gate-north", "library", "parking")
PER_CAMERA = 3


def f1(recall: float, precision: float) -> float:
    return 2 * recall * precision / (recall + precision) if recall + precision else 0.0


@pytest.fixture(scope="module")
def calibration(dataset, tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("int8-calib") / "frames", dataset, n=CALIBRATION)


@pytest.fixture(scope="module")
def frames(dataset, calibration, tmp_path_factory) -> dict[str, list[Path]]:
    """Per camera, PER_CAMERA hold-out frames: the labelled-busiest images that are not calibration frames."""
    folder = tmp_path_factory.mktemp("int8-holdout")
    seen = {p.name for p in (calibration / "images").iterdir()}

    def objects(path: Path) -> int:
        labels = dataset / "labels" / f"{path.stem}.txt"
        return len(labels.read_text().split()) // 5 if labels.is_file() else 0

    holdout = [p for p in sorted((dataset / "images").glob("*.jpg")) if p.name not in seen]
    picked = sorted(holdout, key=objects, reverse=True)[:len(CAMERAS) * PER_CAMERA]
    for path in picked:
        shutil.copy(path, folder)
    copies = sorted(folder.glob("*.jpg"))
    return {camera: copies[i::len(CAMERAS)] for i, camera in enumerate(CAMERAS)}


def settings_for(weights: Path, cache: Path, calibration: Path) -> Settings:
    """CAMPUSGUARD_BACKEND=onnx CAMPUSGUARD_PRECISION=int8 with the default gate, the torch fp32
    reference sampling every frame, as a deployment would set them."""
    return Settings(_env_file=None, backend="onnx", precision="int8", weights=weights, imgsz=IMGSZ, threads=1,
                    preprocess_workers=1, warmup_iters=0, onnx_cache_dir=cache, calibration_dir=calibration,
                    calibration_images=CALIBRATION, shadow_backend="torch", shadow_device="cpu", shadow_sample=1.0,
                    shadow_min_interval_s=0.0)


def agreement_series(text: str) -> dict[str, float]:
    return {s.labels["camera_id"]: s.value for family in text_string_to_metric_families(text)
            if family.name == "campusguard_shadow_agreement" for s in family.samples}


@pytest.fixture(scope="module")
def served(weights, onnx_cache, calibration, frames) -> dict:
    """What the running service says after every frame was answered and shadowed."""
    with TestClient(create_app(settings_for(weights, onnx_cache, calibration))) as client:
        wait_until_ready(client, 240, 0.2)
        lane = state_of(client.app).shadow.get()
        for camera, paths in frames.items():
            for path in paths:
                r = client.post(f"/detect?camera_id={camera}", content=path.read_bytes(),
                                headers={"content-type": "image/jpeg"})
                assert r.status_code == 200, r.text
                assert lane.drain(120)  # the default 4-frame queue: one frame at a time, none dropped
        return {"health": client.get("/health").json(), "status": client.get("/status").json()["shadow"],
                "metrics": client.get("/metrics").text}


def parity(args: list[str]) -> None:
    assert main(["parity", *args]) == 0


@pytest.fixture(scope="module")
def parity_says(weights, onnx_cache, calibration, frames, served, tmp_path_factory) -> dict:
    """`campusguard parity` on a folder of the same frames: torch fp32 with a full decode as the
    reference, the int8 model (the same calibration frames: the service's cached model) with the
    service's reduced decode as the candidate. Overall from the command's own report; per camera
    from its stored detections through its ``compare``."""
    images = frames[CAMERAS[0]][0].parent
    out = tmp_path_factory.mktemp("parity")
    common = ["--weights", str(weights), "--images", str(images), "--imgsz", str(IMGSZ), "--threads", "1"]
    int8 = ["--backend", "onnx", "--precisions", "int8", "--calibration", str(calibration)]
    built = sorted((onnx_cache / "int8").iterdir())
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("CAMPUSGUARD_ONNX_CACHE_DIR", str(onnx_cache))
        parity([*common, "--backend", "torch", "--decode", "full", "--write-reference", str(out / "fp32.json")])
        parity([*common, *int8, "--write-reference", str(out / "int8.json")])
        parity([*common, *int8, "--reference", str(out / "fp32.json"), "--out", str(out / "report"),
                "--min-recall", "0", "--min-precision", "0"])
    assert sorted((onnx_cache / "int8").iterdir()) == built  # parity found the served model: nothing new built
    row = json.loads((out / "report" / "parity.json").read_text())["rows"][0]
    reference = json.loads((out / "fp32.json").read_text())
    candidate = json.loads((out / "int8.json").read_text())
    assert row["precision"] == candidate["meta"]["precision"] == "int8" and reference["meta"]["precision"] == "fp32"
    cameras = {}
    for camera, paths in frames.items():
        names = {p.name for p in paths}
        result = compare({k: v for k, v in reference["detections"].items() if k in names},
                         {k: v for k, v in candidate["detections"].items() if k in names})
        cameras[camera] = f1(result.recall, result.box_precision)
    overall = compare(reference["detections"], candidate["detections"])
    assert (overall.recall, overall.box_precision) == pytest.approx((row["recall"], row["box_precision"]))
    return {"overall": f1(row["recall"], row["box_precision"]), "cameras": cameras, "row": row}


@pytest.mark.slow  # its module's server builds and gates an int8 model first: 20-30 s on a 2-core CPU
def test_the_primary_is_the_gated_int8_model(served):
    health = served["health"]
    assert health["precision"] == "int8" and health["precision_requested"] == "int8"
    assert health["precision_fallback"] is False and health["precision_gate"]["passed"] is True
    assert health["precision_gate"]["metric"] == "f1" and health["precision_gate"]["images"] == CALIBRATION
    status = served["status"]
    assert status["reference"]["backend"] == "torch" and status["reference"]["precision"] == "fp32"
    # an int8 replica alerts below its own floor, which /status and the metric both say
    assert status["alert_below"] == ALERT_BELOW["int8"] < ALERT_BELOW["fp32"]
    model = served["health"]["model"]  # the series carry the name of the model they shadow
    assert f'campusguard_shadow_alert_below{{model="{model}"}} {ALERT_BELOW["int8"]}' in served["metrics"]


def test_agreement_per_camera_and_overall_equals_the_f1_of_campusguard_parity(served, parity_says, frames):
    status, expected = served["status"], parity_says
    total = len(CAMERAS) * PER_CAMERA
    assert status["sampled"] == status["compared"] == total
    assert status["dropped"] == {"busy": 0, "stale": 0, "failed": 0}
    assert expected["row"]["images"] == total and expected["row"]["reference_boxes"] > 30
    assert 0.5 < expected["overall"] < 1.0  # int8 is not fp32: the figure is not a trivial 1
    assert status["overall"]["frames"] == total
    assert status["overall"]["agreement"] == pytest.approx(expected["overall"], abs=0.01)
    assert set(status["cameras"]) == set(CAMERAS)
    for camera in CAMERAS:
        reported = status["cameras"][camera]
        assert reported["frames"] == PER_CAMERA
        assert reported["agreement"] == pytest.approx(expected["cameras"][camera], abs=0.01), camera
    series = agreement_series(served["metrics"])
    assert series["_all"] == pytest.approx(status["overall"]["agreement"], abs=1e-4)  # /status rounds to 4 places
    for camera in CAMERAS:
        assert series[camera] == pytest.approx(status["cameras"][camera]["agreement"], abs=1e-4)  # /status rounds to 4 places
    assert not any(math.isnan(v) for v in series.values())

