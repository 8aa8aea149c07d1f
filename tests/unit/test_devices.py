"""Device validation, simulated: GPU inventories and visibility variables are faked, so
these run on CPU-only CI and still cover the ROCm "invalid device ordinal" story."""

from __future__ import annotations

import pytest

from app.inference.devices import VISIBILITY_VARS, gpu_memory_without_torch, parse_device, process_memory, sysfs_memory, validate_device, visibility_report
from app.core.types import DeviceInfo, GpuInventory, MemoryStats
from app.core.errors import ConfigError, DeviceError

pytestmark = pytest.mark.timeout(30)

GIB = 1 << 30
MI = "AMD Instinct MI210"


def rocm(count: int) -> GpuInventory:
    return GpuInventory("rocm", names=tuple(f"{MI} #{i}" for i in range(count)),
                        total_memory=tuple((64 + i) * GIB for i in range(count)))


@pytest.mark.parametrize("device,expected", [("cpu", None), ("cuda:0", 0), ("cuda:3", 3), ("cuda", 0)])
def test_parse_device(device, expected):
    assert parse_device(device) == expected


def test_cpu_always_valid_without_gpu():
    info = validate_device("cpu", GpuInventory("none"), env={})
    assert isinstance(info, DeviceInfo)
    assert info.platform == "cpu" and info.device == "cpu" and info.index is None and info.name


def test_cpu_valid_even_when_gpus_present():
    assert validate_device("cpu", rocm(2), env={"HIP_VISIBLE_DEVICES": "0,1"}).platform == "cpu"


@pytest.mark.parametrize("count,index", [(1, 0), (2, 0), (2, 1)])
def test_valid_ordinal_returns_name_and_memory(count, index):
    info = validate_device(f"cuda:{index}", rocm(count), env={})
    assert info == DeviceInfo(device=f"cuda:{index}", name=f"{MI} #{index}", platform="rocm", index=index,
                              total_memory=(64 + index) * GIB)


def test_valid_ordinal_without_memory_figure():
    info = validate_device("cuda:0", GpuInventory("cuda", names=("NVIDIA L4",)), env={})
    assert info.name == "NVIDIA L4" and info.platform == "cuda" and info.total_memory is None


def test_no_gpu_visible_names_variables_and_devices():
    env = {"HIP_VISIBLE_DEVICES": "3", "ROCR_VISIBLE_DEVICES": "1"}
    with pytest.raises(DeviceError) as info:
        validate_device("cuda:0", rocm(0), env=env)
    msg = info.value.message
    assert "HIP_VISIBLE_DEVICES='3'" in msg and "ROCR_VISIBLE_DEVICES='1'" in msg
    assert "CUDA_VISIBLE_DEVICES" not in msg  # only the variables that are set
    assert "no GPU" in msg and "'cuda:0'" in msg


def test_platform_none_is_no_gpu():
    with pytest.raises(DeviceError) as info:
        validate_device("cuda:0", GpuInventory("none"), env={})
    assert "none of HIP_VISIBLE_DEVICES/ROCR_VISIBLE_DEVICES/CUDA_VISIBLE_DEVICES is set" in info.value.message


@pytest.mark.parametrize("count,index", [(1, 1), (2, 2), (2, 5)])
def test_ordinal_out_of_range_names_everything(count, index):
    env = {"HIP_VISIBLE_DEVICES": "2,3"[: 2 * count - 1], "CUDA_VISIBLE_DEVICES": "0", "UNRELATED": "x"}
    with pytest.raises(DeviceError) as info:
        validate_device(f"cuda:{index}", rocm(count), env=env)
    msg = info.value.message
    assert f"ordinal {index}" in msg and f"only {count} rocm device(s)" in msg
    for name in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        assert name in msg
    assert "ROCR_VISIBLE_DEVICES" not in msg and "UNRELATED" not in msg
    for i in range(count):
        assert f"{i}: {MI} #{i}" in msg
    assert "cuda:0" in msg  # the hint explains ordinals count visible devices only


def test_device_error_is_a_config_error():
    assert issubclass(DeviceError, ConfigError)
    assert DeviceError("x").code == "device_error"


def test_default_env_is_process_environment(monkeypatch):
    for name in VISIBILITY_VARS:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ROCR_VISIBLE_DEVICES", "7")
    assert visibility_report() == "ROCR_VISIBLE_DEVICES='7'"
    with pytest.raises(DeviceError, match="ROCR_VISIBLE_DEVICES='7'"):
        validate_device("cuda:1", rocm(1))


def test_visibility_report_order_and_empty():
    env = {"CUDA_VISIBLE_DEVICES": "1", "HIP_VISIBLE_DEVICES": "0"}
    assert visibility_report(env) == "HIP_VISIBLE_DEVICES='0', CUDA_VISIBLE_DEVICES='1'"
    assert visibility_report({}).startswith("none of")


# --- memory readers ------------------------------------------------------------------------

def fake_card(root, name: str, used: int | str, total: int | str) -> None:
    dev = root / name / "device"
    dev.mkdir(parents=True)
    (dev / "mem_info_vram_used").write_text(f"{used}\n")
    (dev / "mem_info_vram_total").write_text(f"{total}\n")


def test_sysfs_memory_reads_cards_in_numeric_order(tmp_path):
    fake_card(tmp_path, "card10", 10 * GIB, 64 * GIB)
    fake_card(tmp_path, "card2", 2 * GIB, 32 * GIB)
    fake_card(tmp_path, "card1", 1 * GIB, 16 * GIB)
    (tmp_path / "card0" / "device").mkdir(parents=True)  # e.g. an iGPU without VRAM counters
    (tmp_path / "renderD128").mkdir()
    stats = [sysfs_memory(i, root=str(tmp_path)) for i in range(3)]
    assert [s.used for s in stats] == [1 * GIB, 2 * GIB, 10 * GIB]
    assert [s.total for s in stats] == [16 * GIB, 32 * GIB, 64 * GIB]
    assert all(s.source == "sysfs" and s.reserved == s.used for s in stats)
    assert sysfs_memory(3, root=str(tmp_path)) is None


def test_sysfs_memory_missing_or_broken(tmp_path):
    assert sysfs_memory(0, root=str(tmp_path)) is None
    assert sysfs_memory(0, root=str(tmp_path / "does-not-exist")) is None
    fake_card(tmp_path, "card0", "garbage", 1)
    assert sysfs_memory(0, root=str(tmp_path)) is None
    (tmp_path / "card0" / "device" / "mem_info_vram_total").unlink()
    (tmp_path / "card0" / "device" / "mem_info_vram_used").write_text("5")
    assert sysfs_memory(0, root=str(tmp_path)) is None


def test_process_memory_is_positive():
    stats = process_memory()
    assert isinstance(stats, MemoryStats) and stats.source == "rss" and 0 < stats.used <= stats.total


def test_gpu_memory_without_torch_falls_back(monkeypatch):
    import app.inference.devices as devices

    monkeypatch.setattr(devices, "amdsmi_memory", lambda index, bus_id=None: None)
    monkeypatch.setattr(devices, "sysfs_memory", lambda index, bus_id=None: MemoryStats(5, 5, 10, "sysfs"))
    assert gpu_memory_without_torch("rocm", 0).source == "sysfs"
    monkeypatch.setattr(devices, "sysfs_memory", lambda index, bus_id=None: None)
    assert gpu_memory_without_torch("rocm", 0).source == "rss"
    monkeypatch.setattr(devices, "nvml_memory", lambda index, bus_id=None: None)
    assert gpu_memory_without_torch("cuda", 0).source == "rss"


# --- the right GPU when the host has several and the container maps one --------------------

def host_with_three_gpus(tmp_path):
    """sysfs as a per-GPU container sees it: every host card listed, one render node mapped."""
    root, pci, dri = tmp_path / "drm", tmp_path / "pci", tmp_path / "dev-dri"
    for n, bus in enumerate(("0000:03:00.0", "0000:43:00.0", "0000:83:00.0")):
        dev = pci / bus
        dev.mkdir(parents=True)
        (dev / "mem_info_vram_used").write_text(str((n + 1) * GIB))
        (dev / "mem_info_vram_total").write_text(str(64 * GIB))
        for node in (f"card{n}", f"renderD{128 + n}"):
            (root / node).mkdir(parents=True)
            (root / node / "device").symlink_to(dev)
    dri.mkdir()
    (dri / "renderD129").touch()  # the container maps the second GPU only
    return root, dri


def test_sysfs_memory_picks_the_card_by_bus_id(tmp_path):
    root, dri = host_with_three_gpus(tmp_path)
    assert sysfs_memory(0, root=str(root), bus_id="0000:83:00.0", dev_dri=str(dri)).used == 3 * GIB
    assert sysfs_memory(0, root=str(root), bus_id="00000000:43:00.0", dev_dri=str(dri)).used == 2 * GIB  # NVML spelling
    assert sysfs_memory(0, root=str(root), bus_id="0000:99:00.0", dev_dri=str(dri)) is None


def test_sysfs_memory_without_bus_id_follows_the_mapped_render_node(tmp_path):
    root, dri = host_with_three_gpus(tmp_path)
    assert sysfs_memory(0, root=str(root), dev_dri=str(dri)).used == 2 * GIB  # not GPU 0 of the host
    assert sysfs_memory(1, root=str(root), dev_dri=str(dri)) is None


def test_nvml_initialised_once_and_handle_by_bus_id(monkeypatch):
    import sys
    import types

    import app.inference.devices as devices

    calls = {"init": 0}
    fake = types.SimpleNamespace(
        nvmlInit=lambda: calls.__setitem__("init", calls["init"] + 1),
        nvmlDeviceGetHandleByIndex=lambda i: f"idx{i}",
        nvmlDeviceGetHandleByPciBusId=lambda bus: {"0000:43:00.0": "gpu1"}[bus],
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used={"gpu1": 7, "idx0": 1}[h], total=80))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    devices._nvml.cache_clear()
    try:
        assert devices.nvml_memory(0, bus_id="0000:43:00.0").used == 7
        assert devices.nvml_memory(0).used == 1
        assert devices.nvml_memory(0, bus_id="0000:43:00.0").used == 7
        assert calls["init"] == 1
    finally:
        devices._nvml.cache_clear()


def test_amdsmi_initialised_once_and_handle_by_bdf(monkeypatch):
    import sys
    import types

    import app.inference.devices as devices

    calls = {"init": 0}
    bdf = {"h0": "0000:03:00.0", "h1": "0000:43:00.0", "h2": "0000:83:00.0"}
    fake = types.SimpleNamespace(
        amdsmi_init=lambda: calls.__setitem__("init", calls["init"] + 1),
        amdsmi_get_processor_handles=lambda: list(bdf),
        amdsmi_get_gpu_device_bdf=lambda h: bdf[h],
        AmdSmiMemoryType=types.SimpleNamespace(VRAM="vram"),
        amdsmi_get_gpu_memory_usage=lambda h, kind: int(h[1]) + 10,
        amdsmi_get_gpu_memory_total=lambda h, kind: 100)
    monkeypatch.setitem(sys.modules, "amdsmi", fake)
    devices._amdsmi.cache_clear()
    try:
        assert devices.amdsmi_memory(0, bus_id="0000:83:00.0").used == 12
        assert devices.amdsmi_memory(0).used == 10
        assert devices.amdsmi_memory(0, bus_id="0000:99:00.0") is None
        assert calls["init"] == 1
    finally:
        devices._amdsmi.cache_clear()


def test_validate_device_carries_the_bus_id():
    inv = GpuInventory("rocm", ("MI300X",), (192 * GIB,), ("0000:43:00.0",))
    assert validate_device("cuda:0", inv).bus_id == "0000:43:00.0"
