"""Backend name -> factory. Adding a runtime is one class and one line here."""

from __future__ import annotations

from typing import Callable

from app.inference.backends.base import Detector
from app.config import Settings
from app.core.errors import ConfigError


def _torch(settings: Settings) -> Detector:
    from app.inference.backends.torch_backend import TorchDetector

    return TorchDetector.from_settings(settings)


def _onnx(settings: Settings) -> Detector:
    from app.inference.backends.onnx_backend import OnnxDetector

    return OnnxDetector.from_settings(settings)


BACKENDS: dict[str, Callable[[Settings], Detector]] = {"torch": _torch, "onnx": _onnx}


def load_backend(settings: Settings) -> Detector:
    try:
        factory = BACKENDS[settings.backend]
    except KeyError:
        raise ConfigError(f"unknown backend {settings.backend!r}; choose one of {sorted(BACKENDS)}") from None
    return factory(settings)
