"""OnnxDetector on a GPU device, simulated: fake provider lists, ORT versions and a session
that falls back to CPU the way onnxruntime's Python wrapper does."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from app.inference.backends import onnx_backend
from app.inference.backends.onnx_backend import OnnxDetector, arena_spec, migraphx_options
from app.core.types import GpuInventory
from app.core.errors import ConfigError
from app.wiring import backend_options

REAL_SESSION = ort.InferenceSession


@pytest.fixture()
def tiny_model(tmp_path) -> Path:
    """(N,3,32,32) -> (N,3,32,32) Identity with YOLO-export metadata: enough for the session."""
    graph = helper.make_graph([helper.make_node("Identity", ["images"], ["output0"])], "tiny",
                              [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["N", 3, 32, 32])],
                              [helper.make_tensor_value_info("output0", TensorProto.FLOAT, ["N", 3, 32, 32])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    helper.set_model_props(model, {"names": "{0: 'person'}", "campusguard_imgsz": "32"})
    path = tmp_path / "tiny.onnx"
    onnx.save(model, str(path))
    return path


def fake_gpu(monkeypatch, available: list[str], active: list[str] | None = None, printed: str = "",
             runs: list | None = None) -> None:
    """A machine with one GPU whose onnxruntime offers ``available`` and whose session ends
    up on ``active`` (the wrapper's silent fallback when it differs from what was asked)."""
    monkeypatch.setattr(onnx_backend, "_gpu_inventory", lambda: GpuInventory("cuda", ("Fake GPU",), (1 << 34,)))
    monkeypatch.setattr(ort, "get_available_providers", lambda: available)

    class Session(REAL_SESSION):
        def __init__(self, path, sess_options=None, providers=None, provider_options=None):
            super().__init__(path, sess_options=sess_options, providers=["CPUExecutionProvider"])
            self.asked = list(zip(providers, provider_options))
            if printed:
                print(printed)

        def get_providers(self):
            return active if active is not None else ["CPUExecutionProvider"]

        def run(self, output_names, feed, run_options=None):
            if runs is not None:
                runs.append(run_options)
            spec = run_options.get_run_config_entry("memory.enable_memory_arena_shrinkage") if run_options else ""
            if "gpu" in spec and self.get_providers()[0] == "CPUExecutionProvider":
                raise RuntimeError("[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Did not find an arena based allocator "
                                   "registered for device-id  combination in a memory arena shrink list: gpu:0")
            return super().run(output_names, feed)

    monkeypatch.setattr(ort, "InferenceSession", Session)


def test_gpu_device_without_gpu_provider_is_refused(monkeypatch, tiny_model):
    fake_gpu(monkeypatch, ["AzureExecutionProvider", "CPUExecutionProvider"])
    with pytest.raises(ConfigError, match=r"needs a GPU execution provider.*CPUExecutionProvider.*ONNX_CPU_FALLBACK"):
        OnnxDetector(tiny_model, device="cuda:0", imgsz=32, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])


def test_asking_for_the_removed_rocm_provider_names_migraphx(monkeypatch, tiny_model):
    """ONNX Runtime 1.23 removed the ROCm provider: CAMPUSGUARD_ONNX_PROVIDERS=rocm,cpu on a build
    without it stops with the reason and the provider to ask for, not only "no GPU provider"."""
    fake_gpu(monkeypatch, ["CPUExecutionProvider"])
    with pytest.raises(ConfigError, match=r"removed the ROCm execution provider.*'migraphx'"):
        OnnxDetector(tiny_model, device="cuda:0", imgsz=32, providers=["ROCMExecutionProvider", "CPUExecutionProvider"])
    with pytest.raises(ConfigError) as err:  # CUDA asked for: no word about ROCm
        OnnxDetector(tiny_model, device="cuda:0", imgsz=32, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert "ROCm" not in str(err.value)


def test_silent_fallback_after_ep_error_is_refused_with_the_reason(monkeypatch, tiny_model):
    printed = ("*************** EP Error ***************\n"
               "EP Error libcudnn.so.9: cannot open shared object file when using ['CUDAExecutionProvider', "
               "'CPUExecutionProvider']\nFalling back to ['CPUExecutionProvider'] and retrying.")
    fake_gpu(monkeypatch, ["CUDAExecutionProvider", "CPUExecutionProvider"], printed=printed)
    with pytest.raises(ConfigError) as err:
        OnnxDetector(tiny_model, device="cuda:0", imgsz=32, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert "CUDAExecutionProvider failed to start" in str(err.value)
    assert "libcudnn.so.9" in str(err.value) and "ONNX_CPU_FALLBACK" in str(err.value)


def test_unregistered_provider_without_message_is_refused(monkeypatch, tiny_model):
    fake_gpu(monkeypatch, ["CUDAExecutionProvider", "CPUExecutionProvider"])
    with pytest.raises(ConfigError, match="did not register it"):
        OnnxDetector(tiny_model, device="cuda:0", imgsz=32, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])


def test_explicit_cpu_fallback_runs_and_reports_cpu(monkeypatch, tiny_model):
    runs: list = []
    fake_gpu(monkeypatch, ["CUDAExecutionProvider", "CPUExecutionProvider"], active=["CPUExecutionProvider"], runs=runs)
    det = OnnxDetector(tiny_model, device="cuda:0", imgsz=32, cpu_fallback=True,
                       providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert det.provider == "CPUExecutionProvider" and det.precision == "fp32"
    # item 5: the arena string follows the provider that runs (CPU), not the device (cuda:0)
    assert det._arena == "cpu:0"
    det.release_cache()
    x = np.ones((2, 3, 32, 32), np.float32)
    np.testing.assert_array_equal(det.infer(x), x)
    assert runs[-1] is not None  # shrinkage rode on that run


def test_refused_shrinkage_never_fails_inference(monkeypatch, tiny_model):
    fake_gpu(monkeypatch, ["CUDAExecutionProvider", "CPUExecutionProvider"], active=["CPUExecutionProvider"])
    det = OnnxDetector(tiny_model, device="cuda:0", imgsz=32, cpu_fallback=True,
                       providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    det._arena = "cpu:0;gpu:0"  # as a wrong spec would be: the run carrying it raises INVALID_ARGUMENT
    det.release_cache()
    x = np.ones((1, 3, 32, 32), np.float32)
    np.testing.assert_array_equal(det.infer(x), x)
    det.release_cache()
    assert det._shrink_next is False  # disabled after the refusal, not retried every N runs


def test_arena_spec_by_active_provider():
    assert arena_spec("CPUExecutionProvider", 1) == "cpu:0"
    assert arena_spec("CUDAExecutionProvider", 1) == "cpu:0;gpu:1"
    assert arena_spec("MIGraphXExecutionProvider", None) == "cpu:0"


@pytest.mark.parametrize("version", ["1.22.1", "1.21.0"])
def test_migraphx_old_ort_uses_save_load_keys(tmp_path, tiny_model, version):
    opts = migraphx_options(0, True, tmp_path, tiny_model, 8, version)
    assert "migraphx_model_cache_dir" not in opts
    assert opts["migraphx_save_compiled_model"] == "1" and opts["migraphx_fp16_enable"] == "1"
    path = Path(opts["migraphx_save_model_path"])
    assert "-b8-fp16" in path.name and "migraphx_load_compiled_model" not in opts
    path.write_bytes(b"compiled")
    again = migraphx_options(0, True, tmp_path, tiny_model, 8, version)
    assert again["migraphx_load_model_path"] == str(path)


@pytest.mark.parametrize("version", ["1.23.0", "1.24.2+rocm7.1"])
def test_migraphx_new_ort_uses_cache_dir(tmp_path, tiny_model, version):
    opts = migraphx_options(1, False, tmp_path, tiny_model, 16, version)
    assert not any(k.startswith(("migraphx_save", "migraphx_load")) for k in opts)
    assert opts["device_id"] == "1" and Path(opts["migraphx_model_cache_dir"]).is_dir()


def test_migraphx_cache_key_separates_batch_precision_and_content(tmp_path, tiny_model):
    def where(fp16, batch):
        return migraphx_options(0, fp16, tmp_path, tiny_model, batch, "1.23.0")["migraphx_model_cache_dir"]

    keys = {where(False, 8), where(True, 8), where(False, 16)}
    other = tmp_path / "other" / "tiny.onnx"
    other.parent.mkdir()
    other.write_bytes(tiny_model.read_bytes() + b"\0")
    keys.add(migraphx_options(0, False, tmp_path, other, 8, "1.23.0")["migraphx_model_cache_dir"])
    assert len(keys) == 4


def test_migraphx_session_runs_one_fixed_padded_batch(monkeypatch, tiny_model, tmp_path):
    runs: list = []
    fake_gpu(monkeypatch, ["MIGraphXExecutionProvider", "CPUExecutionProvider"],
             active=["MIGraphXExecutionProvider", "CPUExecutionProvider"], runs=runs)
    monkeypatch.setattr(ort, "__version__", "1.23.0")
    shapes: list = []
    det = OnnxDetector(tiny_model, device="cuda:0", imgsz=32, cache_dir=tmp_path, max_batch_size=4,
                       providers=["MIGraphXExecutionProvider", "CPUExecutionProvider"])
    asked = dict(det.session.asked)["MIGraphXExecutionProvider"]
    assert "migraphx_model_cache_dir" in asked and "-b4-" in asked["migraphx_model_cache_dir"]
    real_run = det.session.run
    det.session.run = lambda names, feed, opts=None: shapes.append(feed["images"].shape) or real_run(names, feed, opts)
    x = np.random.default_rng(0).random((6, 3, 32, 32), dtype=np.float32)
    np.testing.assert_array_equal(det.infer(x), x)
    det.infer(x[:1])  # warm-up and single frames run at the compiled batch too
    assert shapes == [(4, 3, 32, 32)] * 3


def test_fp16_with_fp32_graph_warns(monkeypatch, tiny_model, caplog):
    det = OnnxDetector(tiny_model, imgsz=32, half=True)
    assert det.precision == "fp32"
    assert "fp32 graph" in caplog.text


def test_raw_call_runs_the_session(tiny_model):
    det = OnnxDetector(tiny_model, imgsz=32)
    x = np.ones((2, 3, 32, 32), np.float32)
    np.testing.assert_array_equal(det.raw_call(x)()[0], x)


def test_missing_gpu_provider_is_refused_before_any_export(monkeypatch, tmp_path):
    from app.config import Settings

    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CPUExecutionProvider"])
    monkeypatch.setattr(onnx_backend, "export_onnx", lambda *a, **k: pytest.fail("exported before checking"))
    weights = tmp_path / "yolov8m.yaml"
    with pytest.raises(ConfigError, match="needs a GPU execution provider"):
        OnnxDetector.from_options(backend_options(Settings(_env_file=None, backend="onnx", weights=weights, device="cuda:0",
                                            onnx_cache_dir=tmp_path)))
