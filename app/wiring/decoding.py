"""Which decoder a model's pipeline gets (CAMPUSGUARD_DECODE): decided once when the pipeline is
built, logged, shown in /health, and never changed per request (app/inference/decoding.py).

``auto`` is the device decoder when the model runs on a GPU (CUDA, or ROCm's ``cuda:N``) and
torchvision decodes JPEG there (one decode is tried), else the host's. ``device`` on a CPU model
is torchvision's decode on the CPU: the tests and ``campusguard parity --decode device`` run the
device path that way; it is slower than OpenCV's reduced decode, so ``auto`` never picks it. An
explicit ``device`` that cannot run stops the start (exit 2) instead of quietly decoding on the host.
"""

from __future__ import annotations

import logging

from app.config import Settings
from app.core.errors import ConfigError
from app.inference.backends.base import Detector
from app.inference.decoding import DecoderInfo
from app.inference.pipeline import FrameDecoder, HostDecoder

log = logging.getLogger("campusguard.decode")
GPU_PLATFORMS = ("cuda", "rocm")


def build_decoder(settings: Settings, detector: Detector) -> FrameDecoder:
    """The decoder for ``detector``'s pipeline, from ``settings.decode``; logged once."""
    decoder = choose_decoder(settings.decode, detector)
    log.info("decode for model %s: %s", detector.model_name, decoder.info.describe())
    return decoder


def choose_decoder(setting: str, detector: Detector) -> FrameDecoder:
    info = detector.device_info()
    on_gpu = info.platform in GPU_PLATFORMS
    if setting == "cpu":
        return HostDecoder(DecoderInfo(setting, "cpu", "cpu", "set explicitly"))
    if setting == "auto" and not on_gpu:
        return HostDecoder(DecoderInfo(setting, "cpu", "cpu", "the model runs on the CPU, where OpenCV's reduced "
                                                              "decode is the faster one"))
    device = info.device if on_gpu else "cpu"
    if setting == "auto":
        reason = f"the model runs on {device} ({info.platform}) and torchvision decodes JPEG there"
    elif on_gpu:
        reason = "set explicitly"
    else:
        reason = "set explicitly; on the CPU this is torchvision's libjpeg decode, for tests and parity only"
    try:
        from app.inference.device_decode import DeviceDecoder, DeviceDecodeUnavailable
    except ImportError as exc:  # a runtime image without torchvision
        return _unavailable(setting, f"torchvision is not importable: {exc}")
    try:
        return DeviceDecoder(device, DecoderInfo(setting, "device", device, reason))
    except DeviceDecodeUnavailable as exc:
        return _unavailable(setting, str(exc))


def _unavailable(setting: str, why: str) -> FrameDecoder:
    if setting == "device":
        raise ConfigError(f"CAMPUSGUARD_DECODE=device: {why} (set cpu or auto)")
    return HostDecoder(DecoderInfo(setting, "cpu", "cpu", f"no device JPEG decode here: {why}"))
