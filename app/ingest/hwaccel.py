"""What ``hwaccel: auto`` means in this process: NVDEC (``cuda``), VA-API (``vaapi``) or ``none``.

Decided once when the embedded ingest is built, from what the node exposes: ``cuda`` when
ffmpeg lists the cuda hwaccel and an NVIDIA device node is visible (the NVIDIA container
toolkit maps ``/dev/nvidia0``), else ``vaapi`` when ffmpeg lists vaapi and the render node
the command uses (``/dev/dri/renderD128``) exists, else ``none``. Only a GPU replica looks
(the model on a GPU: its container has the device); a camera gateway, sized as a CPU pod
without a GPU, and a CPU replica take ``auto`` as ``none`` without probing. The probes are
plain callables so the choice is tested without the hardware.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from app.ingest.command import VAAPI_DEVICE
from app.ingest.source import SourceSpec

log = logging.getLogger("campusguard.ingest")
NVIDIA_DEVICE = "/dev/nvidia0"


@dataclass(frozen=True)
class HwaccelProbes:
    """What the node exposes; each probe answers False (or nothing) when it cannot tell."""

    ffmpeg_hwaccels: Callable[[], frozenset[str]]
    nvidia_device: Callable[[], bool]
    render_node: Callable[[], bool]


def ffmpeg_hwaccels(binary: str = "ffmpeg") -> frozenset[str]:
    """The names ``ffmpeg -hwaccels`` lists (none when ffmpeg is missing or fails)."""
    try:
        out = subprocess.run([binary, "-hide_banner", "-hwaccels"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return frozenset()
    lines = out.stdout.splitlines()
    return frozenset(line.strip() for line in lines[1:] if line.strip()) if out.returncode == 0 else frozenset()


def machine_probes() -> HwaccelProbes:
    return HwaccelProbes(ffmpeg_hwaccels, lambda: Path(NVIDIA_DEVICE).exists(), lambda: Path(VAAPI_DEVICE).exists())


def auto_hwaccel(on_gpu: bool, probes: HwaccelProbes) -> str:
    """What ``auto`` resolves to here: ``none`` unless this process serves its model on a GPU."""
    if not on_gpu:
        return "none"
    listed = probes.ffmpeg_hwaccels()
    if "cuda" in listed and probes.nvidia_device():
        return "cuda"
    if "vaapi" in listed and probes.render_node():
        return "vaapi"
    return "none"


def with_auto(sources: Mapping[str, SourceSpec], resolved: str) -> dict[str, SourceSpec]:
    """``sources`` with every ``hwaccel: auto`` replaced by ``resolved`` (the others unchanged)."""
    return {cid: spec.model_copy(update={"hwaccel": resolved}) if spec.hwaccel == "auto" else spec
            for cid, spec in sources.items()}
