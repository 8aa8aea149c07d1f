"""``CAMPUSGUARD_BACKEND=auto`` and ``CAMPUSGUARD_PRECISION=auto``: the runtime this machine runs best.

The defaults (issue #32, item 5). A default must never crash a start, so every branch ends in
something this machine can run, and the reason is kept to be logged and shown in ``/health``:

* a GPU (``CAMPUSGUARD_DEVICE=cuda:N``, or torch sees one: CUDA or ROCm) keeps the choice from
  before ``auto``: torch, fp32. Compose and the Kubernetes manifests set the backend explicitly
  anyway, and the GPU images do not install the openvino extra;
* a CPU machine with the openvino extra: openvino, in bf16 where the CPU has a native bf16
  instruction set (``avx512_bf16`` or ``amx_bf16``), fp32 otherwise (issue #32 measured bf16 at
  2x ONNX Runtime fp32 within 0.003 mAP);
* a CPU machine without it: onnx fp32 (the reason names the extra to install), or torch fp32
  where ONNX Runtime is missing too; ``.onnx`` weights: onnx (openvino builds from the ``.pt``).

int8 is never chosen implicitly: it needs calibration frames of the site and changes accuracy.
An explicit backend with ``PRECISION=auto`` gets that backend's best precision the same way.

A backend chosen by ``auto`` that then fails to load (a broken openvino wheel, a model it cannot
convert) is not the operator's mistake, so the start does not end there: ``Choice.fallbacks`` lists
the runtimes that come next on this machine (openvino, then onnx, then torch), and
``Choice.after_failure`` is the next one with the failure named in its reason. A backend set
explicitly has no fallbacks: what was asked for runs, or the start says why it cannot.

``resolve`` takes plain values and the machine's probes, so tests hand it any machine; the
service uses ``system_probes`` (cheap: device nodes before torch is imported, no runtime loaded).
"""

from __future__ import annotations

import functools
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

AUTO = "auto"
GPU_NODES = ("/dev/nvidiactl", "/dev/nvidia0", "/dev/kfd", "/dev/dxg")  # CUDA, ROCm, WSL: torch needs one


@dataclass(frozen=True)
class Probes:
    """What the machine offers, asked only when ``auto`` needs the answer."""

    gpu: Callable[[], bool]  # torch sees a CUDA or ROCm device
    openvino: Callable[[], bool]  # the openvino extra is installed
    onnx: Callable[[], bool]  # ONNX Runtime and the onnx exporter are installed
    cpu_flags: Callable[[], frozenset[str]]  # /proc/cpuinfo's flags


@dataclass(frozen=True)
class Choice:
    """The backend and precision served, what was set, and why (startup log and ``/health``)."""

    backend: str
    precision: str
    requested_backend: str
    requested_precision: str
    reason: str
    fallbacks: tuple[tuple[str, str], ...] = ()  # (backend, precision) to load, in order, if this one fails

    def after_failure(self, error: BaseException) -> Choice | None:
        """The next runtime to load once this one failed to load; ``None`` when none is left."""
        if not self.fallbacks:
            return None
        (backend, precision), rest = self.fallbacks[0], self.fallbacks[1:]
        failure = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else '-'}"
        reason = (f"{self.backend} {self.precision} failed to load ({failure[:300]}): "
                  f"{backend} {precision}, the next choice")
        return Choice(backend, precision, self.requested_backend, self.requested_precision, reason, rest)

    def describe(self) -> dict[str, str]:
        return {"backend": self.requested_backend, "precision": self.requested_precision,
                "resolved": f"{self.backend} {self.precision}", "reason": self.reason}


@functools.lru_cache(maxsize=1)
def gpu_present() -> bool:
    """torch sees a GPU; without a GPU device node torch is not even imported (it takes seconds)."""
    if not any(Path(node).exists() for node in GPU_NODES):
        return False
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # noqa: BLE001 - a broken driver stack means: no usable GPU
        return False


def installed(*modules: str) -> bool:
    return all(importlib.util.find_spec(name) is not None for name in modules)


def system_probes() -> Probes:
    from app.inference.precision.cpu import cpu_flags

    return Probes(gpu=gpu_present, openvino=lambda: installed("openvino"),
                  onnx=lambda: installed("onnxruntime", "onnx"), cpu_flags=cpu_flags)


def resolve(backend: str, precision: str, device: str, weights_suffix: str, probes: Probes | None = None) -> Choice:
    """The concrete (backend, precision) for the settings as given; ``auto`` in either is resolved."""
    if AUTO not in (backend, precision):
        return Choice(backend, precision, backend, precision, "set explicitly")
    probes = probes or system_probes()
    reasons: list[str] = []
    chosen = backend
    if backend == AUTO:
        chosen, why = _backend(precision, device, weights_suffix.lower(), probes)
        reasons.append(why)
    chosen_precision = precision
    if precision == AUTO:
        chosen_precision, why = _precision(chosen, device, probes)
        reasons.append(why)
    fallbacks = _fallbacks(chosen, precision, device, weights_suffix.lower(), probes) if backend == AUTO else ()
    return Choice(chosen, chosen_precision, backend, precision, "; ".join(reasons), fallbacks)


def _fallbacks(chosen: str, precision: str, device: str, suffix: str, probes: Probes) -> tuple[tuple[str, str], ...]:
    """What comes after ``chosen`` in auto's order on this machine, each at fp32 (PRECISION=auto) or
    at the precision set where that backend runs it; nothing on a GPU (torch there is the choice)."""
    from app.inference.precision.spec import SUPPORT, device_kind

    if device != "cpu" or suffix == ".onnx":  # a GPU serves torch; only onnx loads an .onnx file
        return ()
    order = ["openvino", "onnx", "torch"]
    after = order[order.index(chosen) + 1:] if chosen in order else []
    runs = {"onnx": probes.onnx, "torch": lambda: True}
    wanted = "fp32" if precision == AUTO else precision
    return tuple((b, wanted) for b in after
                 if runs[b]() and wanted in SUPPORT[b][device_kind(device)])


def _backend(precision: str, device: str, suffix: str, probes: Probes) -> tuple[str, str]:
    if device != "cpu":
        return "torch", f"CAMPUSGUARD_DEVICE={device}: torch on the GPU"
    if probes.gpu():
        return "torch", ("torch sees a GPU: torch, the GPU default (this replica runs on the CPU until "
                         "CAMPUSGUARD_DEVICE=cuda:0)")
    if precision == "fp16":  # a GPU precision: the GPU default, whose check then says fp16 needs a GPU
        return "torch", "PRECISION=fp16 runs on a GPU: torch"
    if suffix == ".onnx":
        return "onnx", "the weights are an .onnx file: onnx (openvino builds its model from a .pt)"
    if probes.openvino():
        return "openvino", "no GPU: openvino, the fastest CPU runtime"
    if precision == "bf16":  # only openvino runs it: its loader then names the extra to install
        return "openvino", "PRECISION=bf16 runs on openvino only (the openvino extra is not installed)"
    if probes.onnx():
        return "onnx", ("no GPU and the openvino extra is not installed (pip install -e '.[openvino]'): onnx, "
                        "the fastest CPU runtime installed")
    return "torch", "no GPU, and neither the openvino extra nor ONNX Runtime is installed: torch"


def _precision(backend: str, device: str, probes: Probes) -> tuple[str, str]:
    from app.inference.precision.cpu import BF16_FLAGS

    if backend != "openvino" or device != "cpu":
        return "fp32", f"fp32 on {backend} (int8 is never chosen implicitly: set PRECISION=int8)"
    have = sorted(probes.cpu_flags() & set(BF16_FLAGS))
    if have:
        return "bf16", f"bf16: this CPU has {have[0]} (int8 is never chosen implicitly)"
    return "fp32", f"fp32: this CPU has neither {BF16_FLAGS[0]} nor {BF16_FLAGS[1]} for bf16"
