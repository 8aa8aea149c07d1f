"""Settings validators: fail fast at startup with a message that names the problem."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from app.config import Settings
from app.core.errors import ConfigError

pytestmark = pytest.mark.timeout(30)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """No CAMPUSGUARD_* variable or .env file of the developer's leaks into these tests."""
    import os

    for key in list(os.environ):
        if key.startswith("CAMPUSGUARD_"):
            monkeypatch.delenv(key)
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("given,expected", [
    ("cpu", "cpu"), ("CPU", "cpu"), (" cuda ", "cuda:0"), ("cuda", "cuda:0"), ("cuda:0", "cuda:0"),
    ("cuda:3", "cuda:3"), ("2", "cuda:2"), ("CUDA:1", "cuda:1"),
])
def test_device_normalised(given, expected):
    assert Settings(device=given).device == expected


@pytest.mark.parametrize("bad", ["gpu0", "gpu", "cuda:", "cuda:x", "rocm:0", "hip:0", "cuda:0,1", "mps", ""])
def test_device_rejected(bad):
    with pytest.raises(ValidationError, match="device"):
        Settings(device=bad)


def test_device_from_environment(monkeypatch):
    monkeypatch.setenv("CAMPUSGUARD_DEVICE", "cuda")
    assert Settings().device == "cuda:0"
    monkeypatch.setenv("CAMPUSGUARD_DEVICE", "gpu0")
    with pytest.raises(ValidationError, match="gpu0"):
        Settings()


def test_onnx_providers_aliases_and_order(monkeypatch):
    monkeypatch.setenv("CAMPUSGUARD_ONNX_PROVIDERS", "rocm, cpu")
    assert Settings().onnx_providers == ["ROCMExecutionProvider", "CPUExecutionProvider"]
    assert Settings(onnx_providers="MIGraphX,cuda").onnx_providers == ["MIGraphXExecutionProvider", "CUDAExecutionProvider"]
    assert Settings().onnx_providers[-1] == "CPUExecutionProvider"
    monkeypatch.delenv("CAMPUSGUARD_ONNX_PROVIDERS")  # default: MIGraphX, then CUDA; no ROCm provider (ORT 1.23)
    assert Settings(_env_file=None).onnx_providers == ["MIGraphXExecutionProvider", "CUDAExecutionProvider",
                                                      "CPUExecutionProvider"]
    with pytest.raises(ValidationError, match="unknown onnx provider"):
        Settings(onnx_providers="vulkan")


def test_precision_is_checked_against_backend_and_device():
    """CAMPUSGUARD_PRECISION replaced HALF: fp16 needs a GPU, int8 runs on onnx on the CPU."""
    from app.wiring import resolve_runtime

    with pytest.raises(ConfigError, match="CAMPUSGUARD_PRECISION=fp16 \\(auto chose torch fp16\\): precision fp16 does "
                                          "not run on backend torch with device cpu"):
        resolve_runtime(Settings(precision="fp16", device="cpu", backend="auto"))  # fp16 is a GPU precision
    with pytest.raises(ConfigError, match="precision int8 does not run on backend torch.*onnx on CPU"):
        resolve_runtime(Settings(precision="int8", backend="torch"))
    with pytest.raises(ConfigError, match="precision int8 does not run on backend onnx with device cuda:0"):
        resolve_runtime(Settings(precision="int8", backend="onnx", device="cuda:0"))
    assert Settings(precision="fp16", device="cpu").precision == "fp16"  # Settings keep what was written
    assert resolve_runtime(Settings(precision="fp16", device="cuda:0", backend="auto")).precision == "fp16"
    assert resolve_runtime(Settings(precision="int8", backend="onnx")).precision == "int8"
    assert resolve_runtime(Settings(backend="torch", precision="auto")).precision == "fp32"  # PRECISION=auto on torch


def test_replaced_half_settings_name_their_successor():
    from app.config import unknown_variables

    problems = unknown_variables(["CAMPUSGUARD_HALF", "CAMPUSGUARD_MIGRAPHX_FP16"])
    assert problems == [
        "CAMPUSGUARD_HALF was replaced: set CAMPUSGUARD_PRECISION=fp16 instead (CAMPUSGUARD_HALF=false is the default, fp32)",
        "CAMPUSGUARD_MIGRAPHX_FP16 was replaced: set CAMPUSGUARD_PRECISION=fp16 instead (MIGraphX then compiles the graph "
        "in fp16)"]


def test_shapes_setting():
    assert Settings().shape_list() == ((640, 640),)
    assert Settings(shapes="384x640,480x640,640").shape_list() == ((640, 640), (384, 640), (480, 640))
    assert Settings(imgsz="384x640", shapes="auto").shape_list([(1280, 960), (1920, 1080)]) == ((384, 640), (480, 640))
    with pytest.raises(ValidationError, match="multiples of 32"):
        Settings(shapes="380x640")


@pytest.mark.parametrize("weights", ["model.pt", "model.onnx", "yolov8m.yaml", "a/b.YML"])
def test_weights_suffixes_accepted(weights):
    backend = "onnx" if weights.endswith(".onnx") else "torch"
    assert Settings(weights=weights, backend=backend).weights == Path(weights)


def test_weights_bad_suffix_and_backend_mismatch():
    with pytest.raises(ValidationError, match="weights must be"):
        Settings(weights="model.tflite")
    from app.wiring import resolve_runtime

    with pytest.raises(ConfigError, match="CAMPUSGUARD_BACKEND=torch.*: backend 'torch' cannot load an .onnx"):
        resolve_runtime(Settings(weights="model.onnx", backend="torch"))
    with pytest.raises(ValidationError):
        Settings(backend="tensorflow")


@pytest.mark.parametrize("field,value", [("imgsz", 16), ("imgsz", 5000), ("conf", 1.5), ("iou", -0.1),
                                         ("max_det", 0), ("cache_clear_every", -1), ("threads", -1)])
def test_ranges(field, value):
    with pytest.raises(ValidationError, match=field):
        Settings(**{field: value})


def test_cache_clear_zero_allowed_and_threads_resolved():
    s = Settings(cache_clear_every=0, threads=0)
    assert s.cache_clear_every == 0 and s.resolved_threads >= 1
    assert Settings(threads=3).resolved_threads == 3


def test_env_file_is_read(tmp_path):
    (tmp_path / ".env").write_text("CAMPUSGUARD_IMGSZ=320\nCAMPUSGUARD_BACKEND=onnx\n")
    s = Settings()
    assert s.imgsz == 320 and s.backend == "onnx"


def test_display_model_name():
    assert Settings(weights="x/yolov8n.pt").display_model_name == "yolov8n"
    assert Settings(weights="x/yolov8n.pt", model_name="campus").display_model_name == "campus"


@pytest.mark.parametrize("raw,expected", [("640", 640), (320, 320), ("384x640", (384, 640)), ("384,640", (384, 640)),
                                          ("640X640", 640), ([256, 512], (256, 512))])
def test_imgsz_square_or_rectangle(raw, expected):
    assert Settings(_env_file=None, imgsz=raw).imgsz == expected


@pytest.mark.parametrize("raw", ["300", "384x600", "x", "1x2x3", "0", "8192"])
def test_imgsz_rejects_bad_shapes(raw):
    with pytest.raises(ValidationError):
        Settings(_env_file=None, imgsz=raw)


def test_imgsz_from_environment(monkeypatch):
    monkeypatch.setenv("CAMPUSGUARD_IMGSZ", "384x640")
    assert Settings(_env_file=None).imgsz == (384, 640)
