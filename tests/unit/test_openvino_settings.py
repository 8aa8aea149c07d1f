"""Startup errors of the openvino backend and its precisions: each a clear sentence before
anything loads (the wiring's check of the runtime the settings resolve to), naming what to change."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from app import wiring
from app.config import Settings
from app.core.errors import ConfigError
from app.inference.precision import cpu
from app.inference.precision.spec import check_precision


def make(**values) -> Settings:
    return Settings(_env_file=None, **values)


def served(**values) -> str:
    """The precision the wiring serves for these settings (ConfigError: it cannot run here)."""
    return wiring.resolve_runtime(make(**values)).precision


def test_bf16_runs_on_openvino_only():
    for backend in ("torch", "onnx"):
        with pytest.raises(ConfigError, match=f"CAMPUSGUARD_PRECISION=bf16: precision bf16 does not run on backend "
                                              f"{backend} with device cpu; it runs on openvino on CPU"):
            served(backend=backend, precision="bf16")


def test_fp16_on_a_cpu_is_refused_for_openvino():
    with pytest.raises(ConfigError, match="fp16 does not run on backend openvino with device cpu; it runs on "
                                          "torch on GPU, onnx on GPU"):
        served(backend="openvino", precision="fp16")


def test_openvino_is_cpu_only():
    with pytest.raises(ConfigError, match="backend openvino runs on the CPU only, not on device cuda:0"):
        check_precision("openvino", "cuda:0", "fp32")


def test_bf16_without_the_cpu_flag_names_it(monkeypatch):
    monkeypatch.setattr(cpu, "cpu_flags", lambda cpuinfo=cpu.CPUINFO: frozenset({"avx2", "avx512f", "avx512_vnni"}))
    with pytest.raises(ConfigError, match=r"bf16 needs a CPU with the avx512_bf16 \(or amx_bf16\) flag, which "
                                          r"this CPU lacks"):
        served(backend="openvino", precision="bf16")


def test_cpu_flags_are_read_from_cpuinfo(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\nflags\t\t: fpu sse avx512_bf16 avx512_vnni\n\nprocessor\t: 1\nflags\t: fpu\n")
    assert cpu.cpu_flags(info) == {"fpu", "sse", "avx512_bf16", "avx512_vnni"}
    assert cpu.cpu_flags(tmp_path / "absent") == frozenset()
    cpu.require_bf16(cpu.cpu_flags(info))
    with pytest.raises(ConfigError, match="avx512_bf16"):
        cpu.require_bf16({"fpu"})


@pytest.mark.skipif(not {"avx512_bf16", "amx_bf16"} & cpu.cpu_flags(), reason="this CPU has no bf16")
def test_bf16_accepted_on_this_cpu():
    assert served(backend="openvino", precision="bf16") == "bf16"


def test_int8_without_calibration_frames_is_an_error(tmp_path):
    with pytest.raises(ConfigError, match="int8 calibrates on CAMPUSGUARD_CALIBRATION_DIR, which is not set"):
        wiring.precision_options(make(backend="openvino", precision="int8", calibration_dir=None))
    with pytest.raises(ConfigError, match="not a folder"):
        wiring.precision_options(make(backend="openvino", precision="int8", calibration_dir=tmp_path / "none"))


def test_openvino_builds_from_the_pt_not_an_onnx():
    assert make(backend="openvino", weights=Path("model.onnx")).backend == "openvino"  # as written
    with pytest.raises(ConfigError, match="CAMPUSGUARD_BACKEND=openvino: backend 'openvino' cannot load an .onnx "
                                          "file"):
        served(backend="openvino", weights=Path("model.onnx"))


def test_requests_in_flight_reach_the_backend():
    options = wiring.backend_options(make(backend="openvino", requests_in_flight=3))
    assert options.backend == "openvino" and options.inflight == 3
    with pytest.raises(ValidationError):
        make(requests_in_flight=-1)


def test_compile_config_sets_precision_explicitly():
    pytest.importorskip("openvino")
    from app.inference.backends.openvino_backend import compile_config

    assert compile_config("fp32", 2, 0) == {"INFERENCE_PRECISION_HINT": "f32", "PERFORMANCE_HINT": "THROUGHPUT",
                                            "INFERENCE_NUM_THREADS": 2}
    assert compile_config("bf16", 0, 1) == {"INFERENCE_PRECISION_HINT": "bf16", "PERFORMANCE_HINT": "LATENCY"}
    assert compile_config("int8", 0, 3)["PERFORMANCE_HINT_NUM_REQUESTS"] == 3
