"""Backend name -> factory. Adding a runtime is one class and one line here.

It is also the one seam where the tests' fault injector enters (tests/support/serve_with_faults.py).
"""

from __future__ import annotations

from typing import Callable

from app.core.errors import ConfigError
from app.inference.backends.base import BackendOptions, Detector


def _torch(options: BackendOptions) -> Detector:
    from app.inference.backends.torch_backend import TorchDetector

    return TorchDetector.from_options(options)


def _onnx(options: BackendOptions) -> Detector:
    from app.inference.backends.onnx_backend import OnnxDetector

    return OnnxDetector.from_options(options)


BACKENDS: dict[str, Callable[[BackendOptions], Detector]] = {"torch": _torch, "onnx": _onnx}


def load_backend(options: BackendOptions) -> Detector:
    try:
        factory = BACKENDS[options.backend]
    except KeyError:
        raise ConfigError(f"unknown backend {options.backend!r}; choose one of {sorted(BACKENDS)}") from None
    return factory(options)
