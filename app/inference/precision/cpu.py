"""What this CPU can compute in, read from the kernel's flags (no runtime loaded).

bf16 pays only on CPUs with native bf16 instructions: AVX-512 BF16 (Intel Cooper Lake and
later Xeons, AMD Zen 4 and later) or AMX (Intel Sapphire Rapids and later). Without them
OpenVINO would emulate it or quietly run f32, so the service refuses at startup instead,
naming the flag it looked for. Checked when the settings are read, before the socket opens.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from app.core.errors import ConfigError

BF16_FLAGS = ("avx512_bf16", "amx_bf16")  # /proc/cpuinfo names; either one runs bf16 natively
CPUINFO = Path("/proc/cpuinfo")


def cpu_flags(cpuinfo: Path = CPUINFO) -> frozenset[str]:
    """The ``flags`` of the first CPU in ``cpuinfo`` (empty where the file is absent)."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def require_bf16(flags: Iterable[str] | None = None) -> None:
    """A clear ConfigError unless the CPU has a native bf16 instruction set."""
    have = frozenset(cpu_flags() if flags is None else flags)
    if not have & set(BF16_FLAGS):
        raise ConfigError(f"precision bf16 needs a CPU with the {BF16_FLAGS[0]} (or {BF16_FLAGS[1]}) flag, which this "
                          f"CPU lacks (/proc/cpuinfo); use CAMPUSGUARD_PRECISION=fp32 or int8")
