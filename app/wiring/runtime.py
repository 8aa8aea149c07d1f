"""What runs the model: ``auto`` resolved on this machine, checked, then loaded and gated.

``Settings`` keeps CAMPUSGUARD_BACKEND / CAMPUSGUARD_PRECISION as the operator wrote them
(``auto`` by default); ``resolve_runtime`` decides what runs here, once, as a ``Choice``
(app/inference/backends/auto.py: backend, precision, what was set, why, what comes next if it
fails to load), and checks the result like an explicit setting: a precision the backend
cannot run, or ``.onnx`` weights for torch or openvino, is a ConfigError naming the setting
(``campusguard serve`` exits 2 with it). Every builder below takes that choice; without one
it resolves the settings itself (the commands and tools that load a single detector).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from app.config import Settings
from app.core.errors import ConfigError
from app.core.metrics import Metrics
from app.inference.backends.auto import Choice, Probes, resolve
from app.inference.backends.base import BackendOptions, Detector
from app.inference.decoding import DecodeSeries
from app.inference.engine import EngineLimits, InferenceEngine
from app.inference.pipeline import DecodePolicy, DetectParams, Pipeline
from app.inference.precision.provision import PrecisionOptions, Provisioned


def resolve_runtime(settings: Settings, probes: Probes | None = None) -> Choice:
    """The backend and precision this machine serves for ``settings`` (``auto`` resolved with
    ``probes``, the machine's own by default), checked; ConfigError naming the setting otherwise."""
    choice = resolve(settings.backend, settings.precision, settings.device, settings.weights.suffix, probes)
    check_runtime(choice, settings)
    return choice


def check_runtime(choice: Choice, settings: Settings) -> None:
    """The checks that need the resolved runtime: the precision runs on the backend and device,
    and the weights' format loads in the backend."""
    from app.inference.precision.spec import check_precision

    chosen = "" if choice.reason == "set explicitly" else f" (auto chose {choice.backend} {choice.precision})"
    try:
        check_precision(choice.backend, settings.device, choice.precision)
    except ConfigError as exc:
        raise ConfigError(f"CAMPUSGUARD_PRECISION={settings.precision}{chosen}: {exc.message}") from None
    if choice.backend in ("torch", "openvino") and settings.weights.suffix.lower() == ".onnx":
        raise ConfigError(f"CAMPUSGUARD_BACKEND={settings.backend}{chosen}: backend '{choice.backend}' cannot load an "
                          f".onnx file ({settings.weights}); use backend=onnx"
                          + (" (openvino builds its model from the .pt)" if choice.backend == "openvino" else ""))


def site_resolutions(settings: Settings) -> list[tuple[int, int]]:
    """The camera resolutions the site file declares (for SHAPES=auto); none without one."""
    if settings.site_config is None or not settings.site_config.is_file():
        return []
    from app.rules.site.loader import load_site_config

    config = load_site_config(settings.site_config)
    return [(cam.resolution[0], cam.resolution[1]) for cam in config.cameras if cam.resolution is not None]


def backend_options(settings: Settings, choice: Choice | None = None) -> BackendOptions:
    choice = choice or resolve_runtime(settings)
    shapes = settings.shape_list(site_resolutions(settings) if settings.shapes == "auto" else ())
    return BackendOptions(
        backend=choice.backend, weights=settings.weights, model_name=settings.display_model_name,
        device=settings.device, imgsz=settings.imgsz, shapes=shapes, precision=choice.precision,
        threads=settings.resolved_threads, onnx_providers=tuple(settings.onnx_providers),
        onnx_cache_dir=settings.onnx_cache_dir, onnx_cpu_fallback=settings.onnx_cpu_fallback,
        max_batch_size=settings.max_batch_size, inflight=settings.requests_in_flight)


def decode_policy(settings: Settings) -> DecodePolicy:
    return DecodePolicy(reduce=settings.decode_reduce, evidence_min_width=settings.evidence_min_width)


def precision_options(settings: Settings, choice: Choice | None = None) -> PrecisionOptions:
    """Calibration frames, the gate and how frames are decoded for it (as the service decodes)."""
    from app.inference.precision.gate import GateOptions
    from app.inference.precision.quantize import calibration_images

    precision = (choice or resolve_runtime(settings)).precision
    folder = settings.calibration_dir
    frames: tuple[Path, ...] = ()
    if precision != "fp32":
        if folder is not None and folder.is_dir():
            frames = tuple(calibration_images(folder, settings.calibration_images))
        elif precision == "int8":
            raise ConfigError(f"CAMPUSGUARD_PRECISION=int8 calibrates on CAMPUSGUARD_CALIBRATION_DIR, which is "
                              f"{'not set' if folder is None else f'not a folder: {folder}'}; point it at frames "
                              "from your cameras")
        else:  # fp16 without frames of the site: Ultralytics' two sample images, a gross-failure check
            from ultralytics.utils import ASSETS

            frames = tuple(sorted(Path(ASSETS).glob("*.jpg")))
    gate = GateOptions(dataset=settings.gate_dataset, frames=frames, max_map_drop=settings.gate_max_map_drop,
                       min_f1=settings.gate_min_f1, f1_conf=settings.gate_conf)
    return PrecisionOptions(calibration=frames, gate=gate, decode=decode_policy(settings),
                            max_pixels=settings.max_pixels)


def provision_detector(settings: Settings, progress: Callable[[str], None] = lambda _: None,
                       choice: Choice | None = None) -> Provisioned:
    """The runtime at the requested precision, built and gated (fp32 when the gate refuses)."""
    from app.inference.precision.provision import provision

    choice = choice or resolve_runtime(settings)
    return provision(backend_options(settings, choice), precision_options(settings, choice), progress)


def provision_served(settings: Settings, choice: Choice, progress: Callable[[str], None] = lambda _: None,
                     on_fallback: Callable[[Choice, BaseException], None] = lambda *_: None,
                     ) -> tuple[Choice, Provisioned]:
    """The runtime ``choice`` names; when ``auto`` chose it and it fails to load, the next one
    ``auto`` would choose (``Choice.fallbacks``), so the default never ends a start on a broken
    optional runtime. Returns the choice actually served with what it provisioned."""
    while True:
        try:
            return choice, provision_detector(settings, progress, choice)
        except Exception as exc:  # noqa: BLE001 - any load failure; re-raised when no fallback is left
            following = choice.after_failure(exc)
            if following is None:
                raise
            choice = following
            on_fallback(choice, exc)


def reopen_served(settings: Settings, choice: Choice, provisioned: Provisioned) -> Detector:
    """What ``provision_served`` returned, loaded again on the calling thread without a second
    gate: the runtime's threads take this thread's priority (app/inference/precision/provision.py)."""
    from app.inference.precision.provision import reopen

    return reopen(backend_options(settings, choice), precision_options(settings, choice), provisioned)


def load_detector(settings: Settings, choice: Choice | None = None) -> Detector:
    """The configured runtime with the model loaded (the backend registry picks it; a reduced
    precision is built and gated first)."""
    choice = choice or resolve_runtime(settings)
    if choice.precision == "fp32":
        from app.inference.backends.registry import load_backend

        return load_backend(backend_options(settings, choice))
    return provision_detector(settings, choice=choice).detector


def build_pipeline(settings: Settings, detector: Detector | None = None) -> Pipeline:
    """decode -> letterbox -> infer -> NMS over ``detector`` (loaded from the settings if not given),
    with the JPEG decoder CAMPUSGUARD_DECODE chooses for it (app/wiring/decoding.py)."""
    from app.wiring.decoding import build_decoder

    detector = detector if detector is not None else load_detector(settings)
    return Pipeline(detector, settings.cache_clear_every, settings.max_pixels, decode_policy(settings),
                    build_decoder(settings, detector))


def engine_limits(settings: Settings) -> EngineLimits:
    return EngineLimits(settings.queue_size, settings.max_batch_size, settings.max_queue_delay_ms,
                        settings.request_timeout_s, settings.inference_timeout_s, settings.preprocess_workers,
                        settings.watchdog_exit)


def build_engine(settings: Settings, pipeline: Pipeline, metrics: Metrics) -> InferenceEngine:
    """The engine of the model ``settings`` are for (each named model's settings carry its name:
    its ``model`` label in the metrics)."""
    DecodeSeries.of(metrics).track(pipeline.decoder.fallbacks)  # campusguard_decode_fallback_total
    try:
        size: int | None = settings.weights.stat().st_size
    except OSError:
        size = None
    return InferenceEngine(pipeline, engine_limits(settings), metrics, settings.display_model_name, size)


def detect_defaults(settings: Settings) -> DetectParams:
    return DetectParams(conf=settings.conf, iou=settings.iou, max_det=settings.max_det)
