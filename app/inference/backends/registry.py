"""Backend name -> factory. Adding a runtime is one class and one line here.

It is also the one seam where the tests' fault injector enters (tests/support/serve_with_faults.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from app.core.errors import ConfigError
from app.inference.backends.base import BackendOptions, Detector


def _torch(options: BackendOptions) -> Detector:
    from app.inference.backends.torch_backend import TorchDetector

    return TorchDetector.from_options(options)


def _onnx(options: BackendOptions) -> Detector:
    """One session per fixed shape (each graph has its shape baked in)."""
    from app.inference.backends.onnx_backend import OnnxDetector

    if len(options.all_shapes) == 1:
        return OnnxDetector.from_options(options)
    return per_shape(options, OnnxDetector.from_options)


def _openvino(options: BackendOptions) -> Detector:
    """One compiled model per shape in one detector (int8 needs its calibration frames:
    precision/provision.py passes them)."""
    from app.inference.backends.openvino_backend import load_openvino

    return load_openvino(options)


def per_shape(options: BackendOptions, build: Callable[[BackendOptions], Detector]) -> Detector:
    """A ``ShapeSet`` of one detector per shape of ``options``, each built for that shape alone."""
    from app.inference.backends.shapeset import ShapeSet

    members: dict[tuple[int, int], Detector] = {}
    try:
        for shape in options.all_shapes:
            members[shape] = build(replace(options, imgsz=shape if shape[0] != shape[1] else shape[0], shapes=()))
    except BaseException:
        for member in members.values():
            member.close()
        raise
    return ShapeSet(members)


BACKENDS: dict[str, Callable[[BackendOptions], Detector]] = {"torch": _torch, "onnx": _onnx, "openvino": _openvino}


def load_backend(options: BackendOptions) -> Detector:
    try:
        factory = BACKENDS[options.backend]
    except KeyError:
        raise ConfigError(f"unknown backend {options.backend!r}; choose one of {sorted(BACKENDS)}") from None
    return factory(options)
