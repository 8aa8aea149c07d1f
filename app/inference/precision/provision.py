"""The detector a replica serves at the requested precision, and how it got there.

fp32 loads as before. Any other precision is built from the configured weights (int8:
calibrated per fixed shape and cached, one build at a time across replicas; fp16: the
runtime's half-precision graph), then gated against fp32 on the same frames the way the
service runs them. A model that fails the gate is not served: the replica serves fp32 and
``Provisioned.fallback`` says so (the caller reports it in /health, the log and a metric).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from app.core.errors import ConfigError
from app.inference.backends.base import BackendOptions, Detector
from app.inference.backends.registry import load_backend
from app.inference.pipeline import DecodePolicy, Pipeline
from app.inference.precision.build import Int8Job, build_int8, int8_path
from app.inference.precision.gate import GateOptions, GateVerdict, run_gate
from app.inference.precision.quantize import Recipe
from app.inference.precision.spec import BUILT, REFERENCE, check_precision

log = logging.getLogger("campusguard.precision")
Progress = Callable[[str], None]


@dataclass(frozen=True)
class PrecisionOptions:
    """What app/wiring hands the loader besides the backend options."""

    calibration: tuple[Path, ...] = ()  # the int8 calibration frames (also the unlabelled gate's)
    gate: GateOptions = field(default_factory=GateOptions)
    recipe: Recipe = Recipe()
    decode: DecodePolicy = DecodePolicy()
    max_pixels: int = 40_000_000


@dataclass
class Provisioned:
    detector: Detector
    requested: str
    verdict: GateVerdict | None = None
    note: str = ""  # why there is no verdict (fp32; a ready-made model)

    @property
    def fallback(self) -> bool:
        """True when the requested precision failed its gate and fp32 is served instead."""
        return self.verdict is not None and not self.verdict.passed

    def report(self) -> dict:
        out = {"requested": self.requested, "served": self.detector.precision, "fallback": self.fallback}
        return out | ({"gate": self.verdict.as_dict()} if self.verdict else {"gate": None, "note": self.note})


def provision(options: BackendOptions, precision: PrecisionOptions, progress: Progress = lambda _: None) -> Provisioned:
    requested = options.precision
    check_precision(options.backend, options.device, requested)
    if requested == REFERENCE:
        return Provisioned(load_backend(options), requested, note="fp32 is the reference: no gate")
    if options.weights.suffix.lower() == ".onnx":
        detector = load_backend(options)
        if detector.precision != requested:
            detector.close()
            raise ConfigError(f"{options.weights} computes in {detector.precision}, not {requested}; give the .pt "
                              f"weights (the service builds {requested} itself) or set CAMPUSGUARD_PRECISION="
                              f"{detector.precision}")
        return Provisioned(detector, requested, note="a ready-made model: gate it when it is made "
                                                     "(`campusguard export --int8` always does)")
    progress(f"loading the fp32 reference model ({requested} is gated against it)")
    reference = load_backend(replace(options, precision=REFERENCE))
    try:
        candidate = build_model(options, precision, progress)
    except BaseException:
        reference.close()
        raise
    try:
        verdict = run_gate(_pipeline(reference, precision), _pipeline(candidate, precision), requested,
                           precision.gate, progress)
    except BaseException:
        reference.close()
        candidate.close()
        raise
    if verdict.passed:
        log.info("%s", verdict.summary)
        reference.close()
        return Provisioned(candidate, requested, verdict)
    log.error("%s: serving fp32 instead", verdict.summary)
    candidate.close()
    return Provisioned(reference, requested, verdict)


def reopen(options: BackendOptions, precision: PrecisionOptions, provisioned: Provisioned) -> Detector:
    """The model ``provisioned`` serves, loaded again from what provisioning left on disk (exports,
    int8 models and IR are cached: found, not built) and not gated again.

    Why: a runtime makes its thread pools when its model is loaded (ONNX Runtime's intra-op pool
    with the session, OpenVINO's streams at compile), and on Linux a thread inherits the nice
    value of the thread that creates it. A model provisioned at low priority beside the serving
    one (a swap, a rollout's candidate) is therefore opened again on a thread at the usual
    priority before it serves; an unprivileged process could not lower its threads' nice value
    back afterwards."""
    if provisioned.detector.precision == REFERENCE:  # fp32 asked for, or the gate refused the reduced one
        return load_backend(replace(options, precision=REFERENCE))
    if options.weights.suffix.lower() == ".onnx":  # a ready-made model at its own precision
        return load_backend(options)
    return build_model(options, precision)


def _pipeline(detector: Detector, precision: PrecisionOptions) -> Pipeline:
    return Pipeline(detector, cache_clear_every=0, max_pixels=precision.max_pixels, decode=precision.decode)


def build_model(options: BackendOptions, precision: PrecisionOptions, progress: Progress = lambda _: None) -> Detector:
    """The model at ``options.precision``, built (or found cached) but NOT gated: what
    ``provision`` gates, and what a benchmark loads again once the gate has passed."""
    if options.backend == "openvino":  # builds its own IR per shape (int8: calibrated on these frames)
        from app.inference.backends.openvino_backend import load_openvino

        progress(f"loading the OpenVINO {options.precision} model")
        return load_openvino(options, precision.calibration, progress)
    if options.precision not in BUILT:
        progress(f"loading the {options.precision} model")
        return load_backend(options)
    return _int8(options, precision, progress)


def _int8(options: BackendOptions, precision: PrecisionOptions, progress: Progress) -> Detector:
    """One calibrated int8 ONNX model per fixed shape, from the cached fp32 export of each."""
    from app.inference.backends.onnx_backend import OnnxDetector
    from app.inference.backends.shapeset import ShapeSet
    from app.inference.export import cached_export_path

    if not precision.calibration:
        raise ConfigError("int8 needs calibration frames: set CAMPUSGUARD_CALIBRATION_DIR to a folder of frames "
                          "from your cameras (a few dozen to a few hundred)")
    members: dict[tuple[int, int], Detector] = {}
    shapes = options.all_shapes
    try:
        for i, shape in enumerate(shapes, 1):
            imgsz = shape if shape[0] != shape[1] else shape[0]
            fp32 = cached_export_path(options.weights, imgsz, False, options.onnx_cache_dir)
            target = int8_path(options.onnx_cache_dir, options.weights, shape, precision.calibration, precision.recipe)
            label = f" {i}/{len(shapes)} ({shape[0]}x{shape[1]})"
            if not target.is_file():
                build_int8(Int8Job(fp32, shape, precision.calibration, precision.recipe), target, progress, label)
            members[shape] = OnnxDetector.from_options(replace(options, weights=target, imgsz=imgsz, shapes=()))
    except BaseException:
        for member in members.values():
            member.close()
        raise
    return members[shapes[0]] if len(members) == 1 else ShapeSet(members)
