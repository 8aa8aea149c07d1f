"""GPU discovery, ordinal validation and device-memory readers.

ROCm builds of PyTorch keep the ``torch.cuda`` API, so ``cuda:N`` names the N-th visible
AMD GPU there. A wrong N used to end in "HIP error: invalid device ordinal"; we check it
at startup and name the visibility variables that are set and the devices actually seen.
Memory readers cover each runtime: torch's allocator, AMD SMI or the amdgpu sysfs files
for onnxruntime on AMD, NVML on NVIDIA, and process RSS on CPU.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from app.errors import DeviceError

VISIBILITY_VARS = ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")


@dataclass(frozen=True)
class GpuInventory:
    """What the GPU runtime reports: platform ("rocm", "cuda" or "none") and device names."""

    platform: str
    names: tuple[str, ...] = ()
    total_memory: tuple[int, ...] = ()

    @property
    def count(self) -> int:
        return len(self.names)


@dataclass(frozen=True)
class DeviceInfo:
    """The device a backend runs on, for /health and the build-info metric."""

    device: str
    name: str
    platform: str  # cpu | cuda | rocm
    index: int | None = None
    total_memory: int | None = None


@dataclass(frozen=True)
class MemoryStats:
    """Bytes in use on the device: ``used`` by live tensors, ``reserved`` by the cache."""

    used: int
    reserved: int
    total: int | None
    source: str
    extra: dict[str, int] = field(default_factory=dict)


def torch_inventory() -> GpuInventory:
    """Ask torch which GPUs it sees (works for both the CUDA and the ROCm build)."""
    import torch

    if not torch.cuda.is_available():
        return GpuInventory("none")
    platform = "rocm" if getattr(torch.version, "hip", None) else "cuda"
    count = torch.cuda.device_count()
    names = tuple(torch.cuda.get_device_name(i) for i in range(count))
    totals = tuple(torch.cuda.get_device_properties(i).total_memory for i in range(count))
    return GpuInventory(platform, names, totals)


def parse_device(device: str) -> int | None:
    """'cpu' -> None, 'cuda:3' -> 3 (Settings has already normalised the string)."""
    if device == "cpu":
        return None
    return int(device.split(":", 1)[1]) if ":" in device else 0


def visibility_report(env: dict[str, str] | None = None) -> str:
    env = os.environ if env is None else env
    set_vars = [f"{name}={env[name]!r}" for name in VISIBILITY_VARS if name in env]
    return ", ".join(set_vars) if set_vars else "none of " + "/".join(VISIBILITY_VARS) + " is set"


def validate_device(device: str, inventory: GpuInventory, env: dict[str, str] | None = None) -> DeviceInfo:
    """Check ``device`` against ``inventory``; raise ``DeviceError`` with the whole story."""
    index = parse_device(device)
    if index is None:
        return DeviceInfo(device="cpu", name=cpu_name(), platform="cpu")
    seen = ", ".join(f"{i}: {name}" for i, name in enumerate(inventory.names)) or "no GPU"
    if inventory.platform == "none" or inventory.count == 0:
        raise DeviceError(
            f"device {device!r} requested but no GPU is visible to this process "
            f"({visibility_report(env)}; devices seen: {seen}). Use device=cpu, or check the "
            "container's /dev/kfd and /dev/dri (AMD) or --gpus (NVIDIA) mappings."
        )
    if index >= inventory.count:
        raise DeviceError(
            f"device {device!r} is not visible: ordinal {index} requested but only {inventory.count} "
            f"{inventory.platform} device(s) are visible ({visibility_report(env)}; devices seen: {seen}). "
            "Ordinals count visible devices only: with HIP_VISIBLE_DEVICES=3 the GPU is cuda:0."
        )
    total = inventory.total_memory[index] if index < len(inventory.total_memory) else None
    return DeviceInfo(device=device, name=inventory.names[index], platform=inventory.platform, index=index, total_memory=total)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "cpu"


def process_memory() -> MemoryStats:
    rss = psutil.Process().memory_info().rss
    return MemoryStats(used=rss, reserved=rss, total=psutil.virtual_memory().total, source="rss")


def torch_memory(index: int) -> MemoryStats:
    import torch

    return MemoryStats(
        used=torch.cuda.memory_allocated(index),
        reserved=torch.cuda.memory_reserved(index),
        total=torch.cuda.get_device_properties(index).total_memory,
        source="torch",
    )


def nvml_memory(index: int) -> MemoryStats | None:
    try:
        import pynvml

        pynvml.nvmlInit()
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        info = pynvml.nvmlDeviceGetMemoryInfo(handle)
        return MemoryStats(used=int(info.used), reserved=int(info.used), total=int(info.total), source="nvml")
    except Exception:
        return None


def amdsmi_memory(index: int) -> MemoryStats | None:
    try:
        import amdsmi

        amdsmi.amdsmi_init()
        handle = amdsmi.amdsmi_get_processor_handles()[index]
        used = amdsmi.amdsmi_get_gpu_memory_usage(handle, amdsmi.AmdSmiMemoryType.VRAM)
        total = amdsmi.amdsmi_get_gpu_memory_total(handle, amdsmi.AmdSmiMemoryType.VRAM)
        return MemoryStats(used=int(used), reserved=int(used), total=int(total), source="amdsmi")
    except Exception:
        return None


def sysfs_memory(index: int, root: str = "/sys/class/drm") -> MemoryStats | None:
    """amdgpu exposes VRAM counters per card; index counts cards that have them."""
    cards = sorted(
        (p for p in glob.glob(f"{root}/card*/device/mem_info_vram_used")),
        key=lambda p: int("".join(ch for ch in Path(p).parts[-3] if ch.isdigit()) or 0),
    )
    if index >= len(cards):
        return None
    try:
        used = int(Path(cards[index]).read_text().strip())
        total = int(Path(cards[index]).with_name("mem_info_vram_total").read_text().strip())
    except (OSError, ValueError):
        return None
    return MemoryStats(used=used, reserved=used, total=total, source="sysfs")


def gpu_memory_without_torch(platform: str, index: int) -> MemoryStats:
    """For runtimes that do not expose their allocator (onnxruntime): ask the driver."""
    readers = (amdsmi_memory, sysfs_memory) if platform == "rocm" else (nvml_memory,)
    for reader in readers:
        stats = reader(index)
        if stats is not None:
            return stats
    return process_memory()
