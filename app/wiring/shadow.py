"""The shadow reference (docs/shadow.md): a second, fp32 runtime that re-runs a sample of frames.

Checked before the socket opens (``check_shadow``), loaded after the served model is warm
(``build_shadow``), and its agreement book exported as metrics for the lane in the app's
shadow slot (``register_shadow_metrics``).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from app.config import Settings
from app.core.errors import ConfigError
from app.core.metrics import Metrics
from app.flow.models import ModelRouter
from app.inference.backends.base import BackendOptions
from app.inference.engine import InferenceEngine
from app.inference.pipeline import DecodePolicy, Pipeline
from app.wiring.runtime import resolve_runtime

if TYPE_CHECKING:
    from app.inference.shadow.lane import NoShadow, ShadowLane, ShadowOptions

WORST_PER_CAMERA = 5


def shadow_weights(settings: Settings) -> Path:
    return settings.shadow_weights or settings.weights


def check_shadow(settings: Settings) -> None:
    """Before the socket opens: the reference's weights exist and suit its backend (ConfigError)."""
    if not settings.shadow_backend:
        return
    from app.inference.backends.models import require_weights

    weights = shadow_weights(settings)
    if settings.shadow_backend in ("torch", "openvino") and weights.suffix.lower() == ".onnx":
        raise ConfigError(f"CAMPUSGUARD_SHADOW_BACKEND={settings.shadow_backend} cannot load {weights}: set "
                          "CAMPUSGUARD_SHADOW_WEIGHTS to the .pt, or CAMPUSGUARD_SHADOW_BACKEND=onnx")
    if settings.shadow_backend == "openvino" and settings.shadow_device != "cpu":
        raise ConfigError(f"CAMPUSGUARD_SHADOW_BACKEND=openvino runs on the CPU only, not on "
                          f"CAMPUSGUARD_SHADOW_DEVICE={settings.shadow_device}")
    try:
        require_weights(weights)
    except ConfigError as exc:
        raise ConfigError(f"CAMPUSGUARD_SHADOW_WEIGHTS: {exc.message}") from None


def reference_options(settings: Settings, served_backend: str | None = None) -> BackendOptions:
    """fp32, one square-or-fixed shape (IMGSZ, never SHAPES), batch 1, one request at a time; one CPU
    thread unless both runtimes are torch (torch's thread pool is per process: the reference must
    not shrink it). ``served_backend``: the primary's runtime (resolved from the settings if not given)."""
    cpu = settings.shadow_device == "cpu"
    served = served_backend or resolve_runtime(settings).backend
    threads = settings.resolved_threads if settings.shadow_backend == served == "torch" else 1
    return BackendOptions(
        backend=settings.shadow_backend, weights=shadow_weights(settings), model_name="reference",
        device=settings.shadow_device, imgsz=settings.imgsz, precision="fp32", threads=threads,
        onnx_providers=("CPUExecutionProvider",) if cpu else tuple(settings.onnx_providers),
        onnx_cache_dir=settings.onnx_cache_dir, onnx_cpu_fallback=False, max_batch_size=1, inflight=1)


def shadow_options(settings: Settings) -> ShadowOptions:
    from app.inference.shadow.lane import ShadowOptions

    return ShadowOptions(sample=settings.shadow_sample, min_interval_s=settings.shadow_min_interval_s,
                         max_age_s=max(120.0, settings.request_timeout_s))


def serving_idle(serving: Callable[[], InferenceEngine | None]) -> Callable[[], bool]:
    """The lane's idle check, read through ``serving`` (the default model's slot) at every check: a
    swap of the default puts another engine there and drains and frees the old one, so a check on
    an engine captured at startup would read a freed engine that is always idle and let the
    reference run beside a busy one. No engine there (only while the first one loads) is not idle."""

    def idle() -> bool:
        engine = serving()
        return engine is not None and engine.idle

    return idle


def serving_default(router: ModelRouter) -> Callable[[], InferenceEngine | None]:
    """The engine behind the default model's name now (the one the lane shadows)."""
    return lambda: router.engine(router.default)


def build_shadow(settings: Settings, engine: InferenceEngine, metrics: Metrics,
                 serving: Callable[[], InferenceEngine | None] | None = None) -> ShadowLane | NoShadow:
    """The reference loaded and run once, or ``NoShadow`` when CAMPUSGUARD_SHADOW_BACKEND is empty. A
    reference that cannot load or run is a ConfigError naming the settings: never a silent no-op.
    ``engine``: the primary it is built against (its runtime and precision); ``serving``: where the
    idle check finds the engine serving now (``serving_default``: the service; None: ``engine``
    itself, for a command that runs one engine and never swaps it)."""
    from app.inference.shadow.book import AgreementBook, alert_floor
    from app.inference.shadow.lane import NoShadow, ShadowLane
    from app.inference.shadow.worst import WorstFrames

    if not settings.shadow_backend:
        return NoShadow()
    check_shadow(settings)
    options = reference_options(settings, engine.pipeline.detector.backend)
    try:
        from app.inference.backends.registry import load_backend

        reference = Pipeline(load_backend(options), settings.cache_clear_every, settings.max_pixels,
                             DecodePolicy(reduce=False, evidence_min_width=0))
        reference.infer([reference.prepare(np.full((*reference.shapes[0], 3), 114, np.uint8)).letterboxed],
                        count=False)
    except Exception as exc:
        reason = exc.message if isinstance(exc, ConfigError) else f"{exc.__class__.__name__}: {exc}"
        raise ConfigError(f"the shadow reference (CAMPUSGUARD_SHADOW_BACKEND={settings.shadow_backend}, "
                          f"CAMPUSGUARD_SHADOW_WEIGHTS={options.weights}, CAMPUSGUARD_SHADOW_DEVICE={options.device}) "
                          f"failed to load: {reason}") from exc
    detector = reference.detector
    window = settings.shadow_window_s
    floor = alert_floor(engine.pipeline.detector.precision, settings.shadow_alert_below)
    return ShadowLane(reference, shadow_options(settings), AgreementBook(window, alert_below=floor),
                      WorstFrames(WORST_PER_CAMERA, settings.metrics_max_cameras + 2, window),
                      idle=serving_idle(serving or (lambda: engine)), label=metrics.camera_label,
                      describe={"backend": detector.backend, "provider": detector.provider, "device": options.device,
                                "precision": detector.precision, "weights": options.weights.name})


def register_shadow_metrics(metrics: Metrics, lane: Callable[[], ShadowLane | NoShadow], model: str) -> None:
    """The lane's figures, labelled ``model``: the model the reference shadows (the default)."""
    from app.inference.shadow.collector import ShadowCollector

    metrics.registry.register(ShadowCollector(lambda: lane().book, metrics.model_label(model)))
