"""`campusguard export --int8` end to end at imgsz 320 on a few real COCO frames.

Accuracy is not the point here (8 frames calibrate nothing well; docs/benchmarks.md has
the 640 figures): the mechanics are. The export must gate on mAP, write nothing when it
refuses, keep the metadata the server needs, and the server must serve the result.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import onnx
import pytest

from app.cli import main
from app.config import Settings
from tests.support.datasets import make_dataset
from tests.support.inprocess import wait_until_ready

pytestmark = pytest.mark.timeout(300)

IMGSZ = 320


def metadata(path: Path) -> dict[str, str]:
    return {p.key: p.value for p in onnx.load(str(path)).metadata_props}


@pytest.fixture(scope="module")
def calibration(dataset, tmp_path_factory) -> Path:
    return make_dataset(tmp_path_factory.mktemp("calib") / "frames", dataset, n=8)


@pytest.fixture(scope="module")
def fp32_onnx(weights, tmp_path_factory) -> Path:
    from app.inference.export import export_onnx

    return export_onnx(weights, tmp_path_factory.mktemp("fp32") / "yolov8n-320.onnx", imgsz=IMGSZ, threads=2)


@pytest.fixture(scope="module")
def int8_export(weights, calibration, tmp_path_factory) -> tuple[Path, str, str]:
    """The whole command from a .pt: export, calibrate, score both models, accept."""
    import contextlib
    import io

    out = tmp_path_factory.mktemp("int8") / "models" / "yolov8n-320-int8.onnx"
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        code = main(["export", "--int8", "--weights", str(weights), "--imgsz", str(IMGSZ), "--dynamic-batch",
                     "--calibration", str(calibration), "--max-drop", "1", "--threads", "2", "--no-progress",
                     "--out", str(out)])
    assert code == 0, stderr.getvalue()[-3000:]
    return out, stdout.getvalue(), stderr.getvalue()


def test_int8_export_keeps_metadata_and_reports(int8_export):
    out, stdout, stderr = int8_export
    assert stdout.strip().splitlines()[-1] == str(out)
    assert sorted(p.name for p in out.parent.iterdir()) == [out.name]  # no staging file left behind
    meta = metadata(out)
    assert meta["campusguard_precision"] == "int8"
    assert meta["campusguard_imgsz"] == str(IMGSZ) and meta["stride"] == "32"
    assert ast.literal_eval(meta["names"])[5] == "bus"
    model = onnx.load(str(out))
    ops = {n.op_type for n in model.graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops  # QDQ format
    conv_weights = {i.name: i.data_type for i in model.graph.initializer}
    assert onnx.TensorProto.INT8 in conv_weights.values()
    # the summary table: both models scored on the 8 labelled frames, sizes shown
    words = " ".join(stderr.split())  # rich wraps the table to the terminal width
    for text in ("fp32", "int8", "mAP50-95", "accepted", "8 calibration frames"):
        assert text in words, stderr


def test_int8_model_served_with_its_precision(int8_export, bus_jpg):
    """Loaded like any ONNX model; the detections are real and build_info says int8."""
    from fastapi.testclient import TestClient

    from app.main import create_app

    out = int8_export[0]
    settings = Settings(_env_file=None, backend="onnx", weights=out, imgsz=IMGSZ, threads=2, warmup_iters=1)
    with TestClient(create_app(settings)) as client:
        wait_until_ready(client, 60, 0.1)
        response = client.post("/detect", files={"image": ("bus.jpg", bus_jpg, "image/jpeg")})
        assert response.status_code == 200, response.text
        classes = {d["class_name"] for d in response.json()["detections"]}
        assert {"person", "bus"} <= classes
        assert 'precision="int8"' in client.get("/metrics").text
        health = client.get("/health").json()
        assert health["backend"] == "onnx" and health["precision"] == "int8"


def unlabelled_frames(root: Path, calibration: Path, n: int) -> Path:
    root.mkdir()
    for image in sorted((calibration / "images").iterdir())[:n]:
        shutil.copy(image, root / image.name)
    return root


def test_refusal_writes_nothing_and_exits_1(fp32_onnx, calibration, tmp_path, capsys):
    """A negative --max-drop demands int8 beat fp32 by a full mAP point: always refused.

    The frames carry no labels, so the scores come from --eval-data."""
    out = tmp_path / "out" / "refused.onnx"
    code = main(["export", "--int8", "--weights", str(fp32_onnx), "--calibration",
                 str(unlabelled_frames(tmp_path / "frames", calibration, 3)), "--eval-data", str(calibration),
                 "--calib-method", "minmax", "--max-drop", "-1", "--threads", "2", "--no-progress", "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1, err[-3000:]
    assert "refused" in err and "--max-drop -1" in err and str(out) in err
    assert "REFUSED" in err and "8 labelled images" in " ".join(err.split())
    assert not out.exists() and list(out.parent.iterdir()) == []


def test_unlabelled_folder_exports_with_a_warning(fp32_onnx, calibration, tmp_path, capsys):
    frames = unlabelled_frames(tmp_path / "frames", calibration, 2)
    out = tmp_path / "int8.onnx"
    assert main(["export", "--int8", "--weights", str(fp32_onnx), "--calibration", str(frames),
                 "--calib-method", "minmax", "--threads", "2", "--no-progress", "--out", str(out)]) == 0
    assert "accuracy was not checked" in capsys.readouterr().err
    assert metadata(out)["campusguard_precision"] == "int8"


def test_fixed_batch_model_is_calibrated_in_its_batch(weights, calibration, tmp_path, capsys):
    """A graph exported for batch 2 takes only batches of 2; 3 frames make 2 runs (one padded)."""
    import numpy as np

    from app.wiring import load_detector

    out = tmp_path / "b2-int8.onnx"
    assert main(["export", "--int8", "--weights", str(weights), "--imgsz", str(IMGSZ), "--batch", "2",
                 "--calibration", str(unlabelled_frames(tmp_path / "frames", calibration, 3)),
                 "--threads", "2", "--no-progress", "--out", str(out)]) == 0, capsys.readouterr().err[-3000:]
    detector = load_detector(Settings(_env_file=None, backend="onnx", weights=out, imgsz=IMGSZ, threads=2))
    assert detector.fixed_batch == 2 and detector.precision == "int8"
    assert detector.infer(np.zeros((3, 3, IMGSZ, IMGSZ), np.float32)).shape[:2] == (3, 84)


# --- clear errors, exit 2, nothing written ------------------------------------------------

def export_error(capsys, *args: str) -> str:
    assert main(["export", "--int8", "--no-progress", *args]) == 2
    err = capsys.readouterr().err
    assert "campusguard export: error:" in err and "Traceback" not in err
    return err


def test_calibration_folder_without_images(fp32_onnx, tmp_path, capsys):
    (tmp_path / "empty" / "images").mkdir(parents=True)
    (tmp_path / "empty" / "notes.txt").write_text("no frames here")
    err = export_error(capsys, "--weights", str(fp32_onnx), "--calibration", str(tmp_path / "empty"),
                       "--out", str(tmp_path / "x.onnx"))
    assert "no images" in err
    err = export_error(capsys, "--weights", str(fp32_onnx), "--calibration", str(tmp_path / "nowhere"),
                       "--out", str(tmp_path / "x.onnx"))
    assert "calibration folder not found" in err
    assert not (tmp_path / "x.onnx").exists()


def test_unreadable_calibration_image(fp32_onnx, calibration, tmp_path, capsys):
    frames = tmp_path / "frames"
    frames.mkdir()
    shutil.copy(next((calibration / "images").iterdir()), frames / "a.jpg")
    (frames / "b.jpg").write_bytes(b"\xff\xd8\xff\xe0 this is not really a jpeg")
    err = export_error(capsys, "--weights", str(fp32_onnx), "--calibration", str(frames),
                       "--out", str(tmp_path / "x.onnx"))
    assert "b.jpg" in err and "cannot be used" in err
    assert not (tmp_path / "x.onnx").exists()


def test_model_that_is_not_a_yolo_export(fp32_onnx, calibration, tmp_path, capsys):
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "not-yolo",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 32, 32])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 32, 32])])
    plain = tmp_path / "plain.onnx"
    onnx.save(helper.make_model(graph), str(plain))
    garbage = tmp_path / "garbage.onnx"
    garbage.write_bytes(b"not a protobuf at all")
    int8 = tmp_path / "already-int8.onnx"
    proto = onnx.load(str(fp32_onnx))
    proto.metadata_props.add(key="campusguard_precision", value="int8")
    onnx.save(proto, str(int8))
    for model, message in ((plain, "is not a YOLO ONNX export"), (garbage, "not a readable ONNX model"),
                           (int8, "already a int8 model")):
        err = export_error(capsys, "--weights", str(model), "--calibration", str(calibration),
                           "--out", str(tmp_path / "x.onnx"))
        assert message in err and model.name in err
    err = export_error(capsys, "--weights", str(fp32_onnx), "--imgsz", "640", "--calibration", str(calibration),
                       "--out", str(tmp_path / "x.onnx"))
    assert "exported for imgsz 320" in err
    assert not (tmp_path / "x.onnx").exists()


def test_int8_only_flags_without_int8(weights, tmp_path, capsys):
    assert main(["export", "--weights", str(weights), "--calibration", str(tmp_path), "--out",
                 str(tmp_path / "x.onnx")]) == 2
    assert "only apply with --int8" in capsys.readouterr().err


# --- the pieces the recipe is built from ---------------------------------------------------

def test_fp32_parts_select_the_head_nodes(fp32_onnx):
    from app.core.errors import ConfigError
    from app.inference.precision.quantize import fp32_nodes, inspect_yolo_onnx

    info = inspect_yolo_onnx(fp32_onnx)
    assert info.head_prefix == "/model.22/" and info.imgsz == IMGSZ and info.names[0] == "person"
    model = onnx.load(str(fp32_onnx))
    parts = {part: set(fp32_nodes(model, info.head_prefix, (part,)))
             for part in ("decode", "dfl", "last-convs", "box-branch", "head", "first")}
    assert parts["first"] == {"/model.0/conv/Conv"}
    assert all(n.startswith("/model.22/dfl/") for n in parts["dfl"]) and any("Softmax" in n for n in parts["dfl"])
    assert len(parts["last-convs"]) == 6 and all(n.endswith(".2/Conv") for n in parts["last-convs"])
    # decode = the head minus its convolution branches and the DFL; it holds the final concat
    assert not parts["decode"] & (parts["dfl"] | parts["box-branch"] | parts["last-convs"])
    assert parts["decode"] | parts["dfl"] <= parts["head"]
    assert any(n.startswith("/model.22/Concat") for n in parts["decode"])
    assert parts["head"] == {n.name for n in model.graph.node if n.name.startswith("/model.22/")}
    with pytest.raises(ConfigError, match="unknown fp32 part"):
        fp32_nodes(model, info.head_prefix, ("neck",))


def test_calibration_images_spread_and_limits(calibration):
    from app.core.errors import ConfigError
    from app.inference.precision.quantize import calibration_images, stride_for

    every = calibration_images(calibration)
    assert len(every) == 8 and every == sorted(every)
    picked = calibration_images(calibration, 3)
    assert [p.name for p in picked] == [every[0].name, every[4].name, every[7].name]  # spread, ends kept
    assert calibration_images(calibration / "images", 100) == every  # a plain folder works too
    with pytest.raises(ConfigError, match="--calib-images must be >= 1"):
        calibration_images(calibration, 0)
    assert [stride_for(n) for n in (128, 12, 7, 1)] == [8, 6, 7, 1]
