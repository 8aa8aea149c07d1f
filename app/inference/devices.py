"""GPU discovery, ordinal validation and device-memory readers.

ROCm builds of PyTorch keep the ``torch.cuda`` API, so ``cuda:N`` names the N-th visible
AMD GPU there. A wrong N used to end in "HIP error: invalid device ordinal"; we check it
at startup and name the visibility variables that are set and the devices actually seen.
Memory readers cover each runtime: torch's allocator, AMD SMI or the amdgpu sysfs files
for onnxruntime on AMD, NVML on NVIDIA, and process RSS on CPU.
"""

from __future__ import annotations

import functools
import glob
import os
from collections.abc import Mapping
from pathlib import Path

import psutil

from app.core.errors import DeviceError
from app.core.types import DeviceInfo, GpuInventory, MemoryStats

VISIBILITY_VARS = ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES")


def torch_inventory() -> GpuInventory:
    """Ask torch which GPUs it sees (works for both the CUDA and the ROCm build)."""
    import torch

    if not torch.cuda.is_available():
        return GpuInventory("none")
    platform = "rocm" if getattr(torch.version, "hip", None) else "cuda"
    count = torch.cuda.device_count()
    names = tuple(torch.cuda.get_device_name(i) for i in range(count))
    props = [torch.cuda.get_device_properties(i) for i in range(count)]
    totals = tuple(p.total_memory for p in props)
    bus_ids = tuple(pci_bus_id(getattr(p, "pci_domain_id", 0), getattr(p, "pci_bus_id", -1),
                               getattr(p, "pci_device_id", 0)) for p in props)
    return GpuInventory(platform, names, totals, bus_ids if all(bus_ids) else ())


def pci_bus_id(domain: int, bus: int, device: int, function: int = 0) -> str:
    """'0000:03:00.0' (sysfs spelling); '' when torch did not report the bus."""
    return f"{domain:04x}:{bus:02x}:{device:02x}.{function}" if bus >= 0 else ""


def same_bus(a: str, b: str) -> bool:
    """NVML says '00000000:03:00.0', sysfs '0000:03:00.0', amdsmi '0000:03:00.0': compare by value."""
    def norm(text: str) -> tuple[int, ...]:
        parts = text.strip().lower().replace(".", ":").split(":")
        return tuple(int(x, 16) for x in parts[-4:]) if len(parts) >= 4 else tuple(int(x, 16) for x in parts)
    try:
        return norm(a) == norm(b)
    except ValueError:
        return False


def parse_device(device: str) -> int | None:
    """'cpu' -> None, 'cuda:3' -> 3 (Settings has already normalised the string)."""
    if device == "cpu":
        return None
    return int(device.split(":", 1)[1]) if ":" in device else 0


def visibility_report(env: Mapping[str, str] | None = None) -> str:
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
    bus = inventory.bus_ids[index] if index < len(inventory.bus_ids) else None
    return DeviceInfo(device=device, name=inventory.names[index], platform=inventory.platform, index=index,
                      total_memory=total, bus_id=bus)


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


@functools.cache
def _nvml():
    """pynvml, initialised once per process (nvmlInit per sample leaks handles and time)."""
    import pynvml

    pynvml.nvmlInit()
    return pynvml


@functools.cache
def _amdsmi():
    import amdsmi

    amdsmi.amdsmi_init()
    return amdsmi


def nvml_memory(index: int, bus_id: str | None = None) -> MemoryStats | None:
    """NVML lists every host GPU whatever the container maps, so the bus id picks ours."""
    try:
        nvml = _nvml()
        if bus_id:
            handle = nvml.nvmlDeviceGetHandleByPciBusId(bus_id)
        else:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
        info = nvml.nvmlDeviceGetMemoryInfo(handle)
        return MemoryStats(used=int(info.used), reserved=int(info.used), total=int(info.total), source="nvml")
    except Exception:
        return None


def amdsmi_memory(index: int, bus_id: str | None = None) -> MemoryStats | None:
    """AMD SMI lists every host GPU too; match the handle's BDF to our bus id."""
    try:
        smi = _amdsmi()
        handles = smi.amdsmi_get_processor_handles()
        if bus_id:
            handles = [h for h in handles if same_bus(smi.amdsmi_get_gpu_device_bdf(h), bus_id)]
            index = 0
        handle = handles[index]
        used = smi.amdsmi_get_gpu_memory_usage(handle, smi.AmdSmiMemoryType.VRAM)
        total = smi.amdsmi_get_gpu_memory_total(handle, smi.AmdSmiMemoryType.VRAM)
        return MemoryStats(used=int(used), reserved=int(used), total=int(total), source="amdsmi")
    except Exception:
        return None


def sysfs_memory(index: int, root: str = "/sys/class/drm", bus_id: str | None = None,
                 dev_dri: str = "/dev/dri") -> MemoryStats | None:
    """amdgpu's VRAM counters. /sys/class/drm shows every host card even when the container
    maps one render node, so pick the card by bus id, else by the render nodes mapped in
    ``dev_dri``, and only then by position."""
    cards = sorted(
        (Path(p).parent.parent for p in glob.glob(f"{root}/card*/device/mem_info_vram_used")),
        key=lambda c: int("".join(ch for ch in c.name if ch.isdigit()) or 0),
    )
    if bus_id:
        cards = [c for c in cards if same_bus(os.path.basename(os.path.realpath(c / "device")), bus_id)]
        index = 0
    else:
        mapped = {os.path.realpath(Path(root) / node.name / "device") for node in Path(dev_dri).glob("renderD*")} \
            if Path(dev_dri).is_dir() else set()
        visible = [c for c in cards if os.path.realpath(c / "device") in mapped]
        cards = visible or cards
    if index >= len(cards):
        return None
    try:
        used = int((cards[index] / "device" / "mem_info_vram_used").read_text().strip())
        total = int((cards[index] / "device" / "mem_info_vram_total").read_text().strip())
    except (OSError, ValueError):
        return None
    return MemoryStats(used=used, reserved=used, total=total, source="sysfs")


def gpu_memory_without_torch(platform: str, index: int, bus_id: str | None = None) -> MemoryStats:
    """For runtimes that do not expose their allocator (onnxruntime): ask the driver about
    the GPU on ``bus_id`` (the driver's index counts host GPUs, not the container's)."""
    readers = (amdsmi_memory, sysfs_memory) if platform == "rocm" else (nvml_memory,)
    for reader in readers:
        stats = reader(index, bus_id=bus_id)
        if stats is not None:
            return stats
    return process_memory()
