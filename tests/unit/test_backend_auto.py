"""BACKEND=auto and PRECISION=auto (the defaults): every machine gets a runtime it runs, and the reason.

The machine is injected (``Probes``), so the GPU and CPU cases run here without a GPU.
"""

from __future__ import annotations

import itertools

import pytest

from app.inference.backends.auto import Probes, resolve, system_probes

BF16 = frozenset({"avx512f", "avx512_bf16"})


def machine(gpu: bool = False, openvino: bool = True, onnx: bool = True, flags: frozenset[str] = BF16) -> Probes:
    return Probes(gpu=lambda: gpu, openvino=lambda: openvino, onnx=lambda: onnx, cpu_flags=lambda: flags)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    """The suite serves torch fp32 (tests/conftest.py); here the defaults are the point."""
    monkeypatch.delenv("CAMPUSGUARD_BACKEND", raising=False)
    monkeypatch.delenv("CAMPUSGUARD_PRECISION", raising=False)


def test_cpu_machine_with_bf16_gets_openvino_bf16():
    choice = resolve("auto", "auto", "cpu", ".pt", machine())
    assert (choice.backend, choice.precision) == ("openvino", "bf16")
    assert "avx512_bf16" in choice.reason and "openvino" in choice.reason
    assert choice.describe() == {"backend": "auto", "precision": "auto", "resolved": "openvino bf16",
                                 "reason": choice.reason}


@pytest.mark.parametrize("flags", [frozenset({"amx_bf16"}), frozenset({"avx512_bf16"})])
def test_either_bf16_flag_is_enough(flags):
    assert resolve("auto", "auto", "cpu", ".pt", machine(flags=flags)).precision == "bf16"


def test_cpu_without_bf16_gets_openvino_fp32_and_names_the_flags():
    choice = resolve("auto", "auto", "cpu", ".pt", machine(flags=frozenset({"avx2", "avx512_vnni"})))
    assert (choice.backend, choice.precision) == ("openvino", "fp32")
    assert "avx512_bf16" in choice.reason and "amx_bf16" in choice.reason


def test_gpu_keeps_torch_fp32():
    on_gpu = resolve("auto", "auto", "cuda:0", ".pt", machine(gpu=True))
    assert (on_gpu.backend, on_gpu.precision) == ("torch", "fp32") and "cuda:0" in on_gpu.reason
    seen = resolve("auto", "auto", "cpu", ".pt", machine(gpu=True))  # a GPU box whose DEVICE is still cpu
    assert (seen.backend, seen.precision) == ("torch", "fp32") and "CAMPUSGUARD_DEVICE=cuda:0" in seen.reason


def test_without_the_openvino_extra_onnx_fp32_and_the_reason_names_the_extra():
    choice = resolve("auto", "auto", "cpu", ".pt", machine(openvino=False))
    assert (choice.backend, choice.precision) == ("onnx", "fp32")
    assert "openvino extra is not installed" in choice.reason and ".[openvino]" in choice.reason
    bare = resolve("auto", "auto", "cpu", ".pt", machine(openvino=False, onnx=False))
    assert (bare.backend, bare.precision) == ("torch", "fp32")


def test_onnx_weights_go_to_onnx():
    choice = resolve("auto", "auto", "cpu", ".ONNX", machine())
    assert (choice.backend, choice.precision) == ("onnx", "fp32") and ".onnx" in choice.reason


def test_int8_is_never_chosen_implicitly():
    for gpu, ov, ort, flags, device, suffix in itertools.product(
            (False, True), (False, True), (False, True), (BF16, frozenset()), ("cpu", "cuda:0"), (".pt", ".onnx")):
        choice = resolve("auto", "auto", device, suffix, machine(gpu, ov, ort, flags))
        assert choice.precision in ("fp32", "bf16"), choice
        for backend in ("torch", "onnx", "openvino"):
            assert resolve(backend, "auto", device, suffix, machine(gpu, ov, ort, flags)).precision != "int8"


def test_explicit_settings_pass_through_and_auto_fills_the_other_half():
    assert resolve("onnx", "int8", "cpu", ".pt", machine()).reason == "set explicitly"
    assert resolve("openvino", "auto", "cpu", ".pt", machine()).precision == "bf16"
    assert resolve("openvino", "auto", "cpu", ".pt", machine(flags=frozenset())).precision == "fp32"
    assert resolve("torch", "auto", "cpu", ".pt", machine()).precision == "fp32"
    assert resolve("onnx", "auto", "cpu", ".pt", machine()).precision == "fp32"
    explicit_int8 = resolve("auto", "int8", "cpu", ".pt", machine())
    assert (explicit_int8.backend, explicit_int8.precision) == ("openvino", "int8")
    assert resolve("auto", "int8", "cpu", ".pt", machine(openvino=False)).backend == "onnx"
    # bf16 asked for without the extra: openvino, whose loader then names the extra to install
    assert resolve("auto", "bf16", "cpu", ".pt", machine(openvino=False)).backend == "openvino"


def test_settings_keep_auto_and_the_wiring_resolves_it_on_the_machine_it_is_given():
    """Settings hold what the operator wrote: building them asks nothing of the machine. The
    composition root resolves ``auto`` with the machine's probes (here an injected machine, so
    every case runs on any host)."""
    from app.config import Settings
    from app.wiring import resolve_runtime

    assert Settings.model_fields["backend"].default == "auto" and Settings.model_fields["precision"].default == "auto"
    asked: list[str] = []
    spy = Probes(gpu=lambda: asked.append("gpu") or False, openvino=lambda: asked.append("openvino") or True,
                 onnx=lambda: asked.append("onnx") or True, cpu_flags=lambda: asked.append("cpu") or frozenset())
    settings = Settings(_env_file=None)
    assert (settings.backend, settings.precision) == ("auto", "auto") and asked == []
    choice = resolve_runtime(settings, spy)
    assert (choice.backend, choice.precision) == ("openvino", "fp32") and "gpu" in asked and "cpu" in asked
    assert (choice.requested_backend, choice.requested_precision) == ("auto", "auto")
    assert resolve_runtime(settings, machine(gpu=True)).backend == "torch"
    assert resolve_runtime(settings, machine(openvino=False)).backend == "onnx"
    expected = resolve("auto", "auto", "cpu", ".pt", system_probes())  # this host, as `make run` serves it
    assert resolve_runtime(settings) == expected and expected.precision != "int8"
    pinned = resolve_runtime(Settings(_env_file=None, backend="onnx", precision="fp32"), spy)
    assert pinned.reason == "set explicitly" and pinned.backend == "onnx"


def test_the_resolved_choice_is_checked_like_an_explicit_one():
    """auto resolves before the precision table is checked: fp16 on the CPU is still a clear error
    naming the setting, and so is an .onnx file where auto chose torch (a GPU)."""
    from app.config import Settings
    from app.core.errors import ConfigError
    from app.wiring import resolve_runtime

    with pytest.raises(ConfigError, match=r"CAMPUSGUARD_PRECISION=fp16 \(auto chose torch fp16\): .*fp16 does not run"):
        resolve_runtime(Settings(_env_file=None, precision="fp16"), machine())
    with pytest.raises(ConfigError, match=r"CAMPUSGUARD_BACKEND=auto \(auto chose torch fp32\): backend 'torch' "
                                          r"cannot load an .onnx"):
        resolve_runtime(Settings(_env_file=None, weights="model.onnx", device="cuda:0"), machine(gpu=True))
    assert resolve_runtime(Settings(_env_file=None, weights="model.onnx"), machine()).backend == "onnx"


def test_serve_exits_2_naming_the_setting_before_anything_loads(monkeypatch, capsys):
    """`campusguard serve` resolves the runtime before the socket opens: one that cannot run is exit 2."""
    from app import cli

    monkeypatch.setenv("CAMPUSGUARD_PRECISION", "fp16")
    monkeypatch.setenv("CAMPUSGUARD_DEVICE", "cpu")
    assert cli.main(["serve"]) == 2
    assert "CAMPUSGUARD_PRECISION=fp16" in capsys.readouterr().err


def test_health_and_status_say_what_auto_chose():
    from app.config import Settings
    from app.wiring import resolve_runtime
    from tests.support.inprocess import inprocess_app

    settings = Settings(_env_file=None, imgsz=320, threads=1, preprocess_workers=1, warmup_iters=0)
    expected = resolve_runtime(settings)
    with inprocess_app(settings) as app:
        body = app.client.get("/health").json()
    choice = body["backend_choice"]
    assert choice["backend"] == "auto" and choice["precision"] == "auto"
    assert choice["resolved"] == f"{expected.backend} {expected.precision}" and choice["reason"] == expected.reason


def test_a_backend_auto_chose_falls_back_in_auto_order_when_it_fails_to_load():
    choice = resolve("auto", "auto", "cpu", ".pt", machine())
    assert choice.fallbacks == (("onnx", "fp32"), ("torch", "fp32"))
    second = choice.after_failure(ImportError("libopenvino.so.2540: cannot open shared object file\nmore"))
    assert (second.backend, second.precision) == ("onnx", "fp32")
    assert second.reason == ("openvino bf16 failed to load (ImportError: libopenvino.so.2540: cannot open shared "
                             "object file): onnx fp32, the next choice")
    assert (second.requested_backend, second.requested_precision) == ("auto", "auto")
    third = second.after_failure(RuntimeError("export failed"))
    assert (third.backend, third.precision, third.fallbacks) == ("torch", "fp32", ())
    assert third.after_failure(RuntimeError("no")) is None
    # without ONNX Runtime the next is torch; without the openvino extra onnx comes first and then torch
    assert resolve("auto", "auto", "cpu", ".pt", machine(onnx=False)).fallbacks == (("torch", "fp32"),)
    assert resolve("auto", "auto", "cpu", ".pt", machine(openvino=False)).fallbacks == (("torch", "fp32"),)


def test_no_fallback_where_nothing_else_may_run_it():
    # set explicitly: what was asked for runs or the start says why not
    assert resolve("openvino", "auto", "cpu", ".pt", machine()).fallbacks == ()
    assert resolve("onnx", "fp32", "cpu", ".pt", machine()).fallbacks == ()
    # a GPU serves torch; .onnx weights load in onnx only
    assert resolve("auto", "auto", "cuda:0", ".pt", machine(gpu=True)).fallbacks == ()
    assert resolve("auto", "auto", "cpu", ".onnx", machine()).fallbacks == ()
    # an explicit precision keeps to the backends that run it: int8 on onnx, never on torch's CPU
    assert resolve("auto", "int8", "cpu", ".pt", machine()).fallbacks == (("onnx", "int8"),)
    assert resolve("auto", "bf16", "cpu", ".pt", machine()).fallbacks == ()
