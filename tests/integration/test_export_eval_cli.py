"""`campusguard export` and `campusguard eval` mechanics at imgsz 320 (speed, not accuracy).

Exports and evals run as real subprocesses where the exit code and the absence of a
traceback are the point; the rest calls ``app.cli.main`` in-process to stay fast.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from app.cli import main
from app.config import Settings
from app.wiring import backend_options
from tests.conftest import REPO
from tests.support.datasets import make_dataset

pytestmark = pytest.mark.timeout(600)

IMGSZ = 320


def cli(*args: str, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPUSGUARD_")}
    env.update(YOLO_OFFLINE="1", PYTHONPATH=str(REPO), CAMPUSGUARD_ONNX_CACHE_DIR=str(cwd / "onnx-cache"))
    return subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


def input_dims(model: onnx.ModelProto) -> list:
    return [d.dim_param or d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]


def metadata(model: onnx.ModelProto) -> dict[str, str]:
    return {p.key: p.value for p in model.metadata_props}


@pytest.fixture(scope="module")
def fixed_onnx(weights, tmp_path_factory) -> Path:
    """`campusguard export --imgsz 320` as a real subprocess (fixed batch 1)."""
    tmp = tmp_path_factory.mktemp("export-fixed")
    out = tmp / "nested" / "yolov8n-320.onnx"
    proc = cli("export", "--weights", str(weights), "--imgsz", str(IMGSZ), "--out", str(out), cwd=tmp)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == str(out)
    # nothing written into the working directory (Ultralytics writes next to its input)
    assert sorted(p.name for p in tmp.iterdir()) == ["nested"]
    return out


@pytest.fixture(scope="module")
def dynamic_onnx(weights, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("export-dynamic") / "yolov8n-320-dyn.onnx"
    assert main(["export", "--weights", str(weights), "--imgsz", str(IMGSZ), "--dynamic-batch", "--out", str(out)]) == 0
    return out


def test_export_fixed_shape_and_metadata(fixed_onnx):
    model = onnx.load(str(fixed_onnx))
    onnx.checker.check_model(model)
    assert input_dims(model) == [1, 3, IMGSZ, IMGSZ]
    meta = metadata(model)
    assert meta["campusguard_imgsz"] == str(IMGSZ)
    assert meta["campusguard_dynamic_batch"] == "false"
    import ast

    names = ast.literal_eval(meta["names"])
    assert len(names) == 80 and names[0] == "person" and names[5] == "bus" and names[79] == "toothbrush"


def test_export_dynamic_batch_keeps_spatial_dims_fixed(dynamic_onnx):
    model = onnx.load(str(dynamic_onnx))
    dims = input_dims(model)
    assert isinstance(dims[0], str) and dims[0]  # symbolic batch axis
    assert dims[1:] == [3, IMGSZ, IMGSZ]
    assert metadata(model)["campusguard_dynamic_batch"] == "true"
    assert metadata(model)["campusguard_imgsz"] == str(IMGSZ)


def random_batch(n: int) -> np.ndarray:
    return np.random.default_rng(3).random((n, 3, IMGSZ, IMGSZ), dtype=np.float32)


def test_fixed_batch_model_runs_any_batch(fixed_onnx, dynamic_onnx):
    from app.inference.backends.onnx_backend import OnnxDetector

    fixed = OnnxDetector(fixed_onnx, imgsz=IMGSZ)
    dynamic = OnnxDetector(dynamic_onnx, imgsz=IMGSZ)
    assert fixed.fixed_batch == 1 and dynamic.fixed_batch is None
    assert len(fixed.names) == 80 and fixed.imgsz == IMGSZ
    batch = random_batch(3)
    out = fixed.infer(batch)
    anchors = (IMGSZ // 8) ** 2 + (IMGSZ // 16) ** 2 + (IMGSZ // 32) ** 2
    assert out.shape == (3, 84, anchors) and out.dtype == np.float32
    for i in range(3):  # each chunk is the same image's own result, in order
        np.testing.assert_allclose(out[i], fixed.infer(batch[i:i + 1])[0], rtol=1e-4, atol=1e-3)
    np.testing.assert_allclose(out, dynamic.infer(batch), rtol=1e-3, atol=1e-2)


def test_onnx_model_for_another_size_is_refused(fixed_onnx):
    from app.inference.backends.onnx_backend import OnnxDetector
    from app.core.errors import ConfigError

    with pytest.raises(ConfigError, match="imgsz"):
        OnnxDetector(fixed_onnx, imgsz=640)


def test_export_missing_weights_exits_2(tmp_path):
    proc = cli("export", "--weights", str(tmp_path / "nope.pt"), "--imgsz", str(IMGSZ),
               "--out", str(tmp_path / "x.onnx"), cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "weights file not found" in proc.stderr and "nope.pt" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "x.onnx").exists()


def test_export_half_on_cpu_exits_2(weights, tmp_path, capsys):
    assert main(["export", "--weights", str(weights), "--half", "--out", str(tmp_path / "x.onnx")]) == 2
    err = capsys.readouterr().err
    assert "campusguard export: error:" in err and "--half needs a GPU" in err
    assert not (tmp_path / "x.onnx").exists()


def test_export_missing_out_is_usage_error(weights, capsys):
    with pytest.raises(SystemExit) as info:
        main(["export", "--weights", str(weights)])
    assert info.value.code == 2
    assert "--out" in capsys.readouterr().err


# --- eval on broken datasets ------------------------------------------------------------------


def test_eval_without_data_yaml_exits_2(weights, dataset, tmp_path):
    root = make_dataset(tmp_path / "ds", dataset)
    (root / "data.yaml").unlink()
    proc = cli("eval", "--weights", str(weights), "--data", str(root), "--imgsz", str(IMGSZ), "--no-progress",
               cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "data.yaml" in proc.stderr and "is missing" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_eval_malformed_label_exits_2(weights, dataset, tmp_path):
    root = make_dataset(tmp_path / "ds", dataset)
    label = sorted((root / "labels").iterdir())[-1]
    label.write_text(label.read_text() + "17 0.5 0.5\n")  # two numbers short
    proc = cli("eval", "--weights", str(weights), "--data", str(root), "--imgsz", str(IMGSZ), "--no-progress",
               "--json", cwd=tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert f"{label.name}:" in proc.stderr and "malformed label line" in proc.stderr and "17 0.5 0.5" in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("content", ["17 x 0.5 0.1 0.1", "person 0.5 0.5 0.1 0.1", "1.5 0.5 0.5 0.1 0.1"])
def test_read_labels_rejects_malformed_lines(tmp_path, content):
    from app.core.errors import ConfigError
    from app.inference.accuracy import read_labels

    path = tmp_path / "a.txt"
    path.write_text(f"0 0.5 0.5 0.2 0.2\n\n{content}\n")
    with pytest.raises(ConfigError, match=r"a.txt:3: malformed"):
        read_labels(path, 100, 100)


def test_read_labels_converts_to_coco_pixels(tmp_path):
    from app.inference.accuracy import read_labels

    path = tmp_path / "a.txt"
    path.write_text("3 0.5 0.25 0.2 0.1\n")
    assert read_labels(path, 200, 100) == [(3, [80.0, 20.0, 40.0, 10.0])]
    assert read_labels(tmp_path / "missing.txt", 10, 10) == []


def test_load_dataset_errors(dataset, tmp_path):
    from app.core.errors import ConfigError
    from app.inference.accuracy import load_dataset

    root = make_dataset(tmp_path / "ds", dataset, n=1)
    (root / "data.yaml").write_text("path: .\nnc: 80\n")
    with pytest.raises(ConfigError, match="names"):
        load_dataset(root)
    shutil.copy(dataset / "data.yaml", root / "data.yaml")
    for image in (root / "images").iterdir():
        image.unlink()
    with pytest.raises(ConfigError, match="no images"):
        load_dataset(root)
    with pytest.raises(ConfigError, match="is missing"):
        load_dataset(tmp_path / "nowhere")


def test_detect_cli_prints_json_per_image(weights, bus_jpg, tmp_path, capsys):
    import json

    image = tmp_path / "bus.jpg"
    image.write_bytes(bus_jpg)
    assert main(["detect", "--weights", str(weights), "--imgsz", str(IMGSZ), "--conf", "0.5", str(image)]) == 0
    line = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert line["image"] == str(image)
    assert {d["class_name"] for d in line["detections"]} >= {"person"}
    assert all(d["confidence"] > 0.5 for d in line["detections"])


def test_detect_cli_missing_image_exits_2(weights, tmp_path, capsys):
    assert main(["detect", "--weights", str(weights), "--imgsz", str(IMGSZ), str(tmp_path / "nope.jpg")]) == 2
    err = capsys.readouterr().err
    assert "nope.jpg" in err and "campusguard detect: error:" in err


@pytest.mark.parametrize("imgsz", ["300", "16"])
def test_export_imgsz_off_stride_exits_2(weights, tmp_path, capsys, imgsz):
    """Ultralytics would trace 320 for 300; pinned to 300 that graph fails on every frame."""
    assert main(["export", "--weights", str(weights), "--imgsz", imgsz, "--out", str(tmp_path / "x.onnx")]) == 2
    err = capsys.readouterr().err
    assert "campusguard export: error:" in err and imgsz in err
    assert not (tmp_path / "x.onnx").exists()


def test_torch_backend_imgsz_off_stride_refused_at_load(weights):
    from app.inference.backends.torch_backend import TorchDetector
    from app.core.errors import ConfigError

    with pytest.raises(ConfigError, match="multiple of the model's stride 32"):
        TorchDetector(weights, imgsz=300)
    assert TorchDetector(weights, imgsz=IMGSZ).infer(random_batch(1)).shape == (1, 84, 2100)


def test_eval_batch_zero_exits_2(weights, dataset, capsys):
    assert main(["eval", "--weights", str(weights), "--data", str(dataset), "--batch", "0", "--no-progress"]) == 2
    assert "--batch must be >= 1" in capsys.readouterr().err


def test_eval_save_predictions_into_a_missing_folder_exits_2_before_any_work(weights, dataset, tmp_path, capsys):
    target = tmp_path / "nowhere" / "predictions.json"
    assert main(["eval", "--weights", str(weights), "--data", str(dataset), "--save-predictions", str(target),
                 "--no-progress"]) == 2
    assert f"--save-predictions: {target.parent} is not a folder" in capsys.readouterr().err
    assert not target.parent.exists()


def test_eval_image_shape_follows_exif_orientation():
    """Labels are normalised to the upright image, as the pipeline sees it."""
    import io

    from PIL import Image

    from app.inference.accuracy import pipeline_shape

    for orientation, expected in ((1, (24, 40)), (6, (40, 24)), (8, (40, 24)), (3, (24, 40))):
        exif = Image.Exif()
        exif[0x0112] = orientation
        buf = io.BytesIO()
        Image.new("RGB", (40, 24)).save(buf, "JPEG", exif=exif.tobytes())
        assert pipeline_shape(buf.getvalue()) == expected


def test_export_missing_device_exits_2(weights, tmp_path, capsys):
    assert main(["export", "--weights", str(weights), "--device", "cuda:99", "--half",
                 "--out", str(tmp_path / "x.onnx")]) == 2
    err = capsys.readouterr().err
    assert "campusguard export: error:" in err and "cuda:99" in err and "devices seen" in err


def test_export_rectangular_fixed_shape(weights, tmp_path):
    out = tmp_path / "rect.onnx"
    assert main(["export", "--weights", str(weights), "--imgsz", "256x416", "--out", str(out)]) == 0
    model = onnx.load(str(out))
    assert input_dims(model) == [1, 3, 256, 416]
    assert metadata(model)["campusguard_imgsz"] == "256x416"
    from app.inference.backends.onnx_backend import OnnxDetector

    det = OnnxDetector.from_options(backend_options(Settings(_env_file=None, backend="onnx", weights=out, imgsz="256x416")))
    assert det.precision == "fp32"
    assert det.infer(np.zeros((2, 3, 256, 416), np.float32)).shape[:2] == (2, 84)
