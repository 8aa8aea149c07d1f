"""`campusguard export`: a fixed-shape, simplified ONNX model with names and size inside.

Ultralytics' exporter does the tracing and onnxslim simplification; we then pin the
spatial input dims to ``imgsz`` (one fixed shape, the migration's memory lesson) and
record our own metadata so the onnx backend needs nothing but the file. With
``dynamic_batch`` only the batch axis stays symbolic, so micro-batches of any size run
in one call; otherwise the batch is fixed to ``batch``.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from pathlib import Path

from app.core.errors import ConfigError
from app.core.imgsz import ImgSize, format_imgsz, input_hw, parse_imgsz
from app.inference.backends.models import ARCH_SUFFIXES, check_stride, require_weights

META_IMGSZ = "campusguard_imgsz"
META_DYNAMIC_BATCH = "campusguard_dynamic_batch"
META_PRECISION = "campusguard_precision"  # "int8" for `export --int8`; absent means the input's float type


def export_onnx(
    weights: Path,
    out: Path,
    imgsz: ImgSize = 640,
    half: bool = False,
    batch: int = 1,
    dynamic_batch: bool = False,
    device: str = "cpu",
    threads: int | None = None,
) -> Path:
    """Export ``weights`` (.pt or architecture .yaml) to ``out``; returns ``out``."""
    import onnx
    import torch
    from ultralytics import YOLO

    if half and device == "cpu":
        raise ConfigError("--half needs a GPU device: fp16 ONNX export is traced on the GPU")
    if batch < 1:
        raise ConfigError("--batch must be >= 1")
    try:
        imgsz = parse_imgsz(imgsz)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    hw = input_hw(imgsz)
    if min(hw) < 32:
        raise ConfigError(f"--imgsz must be at least 32, got {format_imgsz(imgsz)}")
    if device != "cpu":  # a clear DeviceError now, not the exporter's traceback later
        from app.inference.devices import torch_inventory, validate_device

        validate_device(device, torch_inventory())
    weights = Path(weights)
    is_arch = weights.suffix.lower() in ARCH_SUFFIXES
    require_weights(weights)
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    saved_threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory(prefix="campusguard-export-") as tmp:
        # Ultralytics writes next to its input; the weights may live on a read-only mount.
        # An architecture name is resolved by Ultralytics and exported into the working
        # directory, so build it with the temporary folder as the working directory.
        src = weights.resolve() if is_arch and weights.is_file() else weights
        if not is_arch:
            src = Path(shutil.copy2(weights, Path(tmp) / weights.name))
        with contextlib.chdir(tmp):
            model = YOLO(str(src), task="detect")
        check_stride(model.model, imgsz, option="--imgsz")
        with contextlib.chdir(tmp):
            produced = model.export(
                format="onnx", imgsz=list(hw) if hw[0] != hw[1] else hw[0], half=half, batch=batch,
                dynamic=dynamic_batch, simplify=True, device=device, verbose=False,
            )
            proto = onnx.load(str(produced))
    torch.set_num_threads(threads or saved_threads)  # the exporter's select_device changes it
    _pin_spatial_dims(proto, hw)
    set_metadata(proto, {META_IMGSZ: format_imgsz(imgsz), META_DYNAMIC_BATCH: str(bool(dynamic_batch)).lower()})
    onnx.checker.check_model(proto)
    onnx.save(proto, str(out))
    return out


def _pin_spatial_dims(proto, hw: tuple[int, int]) -> None:
    """Fix H and W of the image input: one shape for every frame."""
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    for axis, size in zip((2, 3), hw, strict=True):
        dims[axis].ClearField("dim_param")
        dims[axis].dim_value = size


def set_metadata(proto, values: dict[str, str]) -> None:
    existing = {prop.key: prop for prop in proto.metadata_props}
    for key, value in values.items():
        if key in existing:
            existing[key].value = value
        else:
            entry = proto.metadata_props.add()
            entry.key, entry.value = key, value


def file_digest(path: Path) -> str:
    """First 12 hex digits of the file's SHA-256: caches (exports, compiled programs) are keyed
    by content, so a replaced model never reuses a stale artefact."""
    import hashlib

    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()[:12]


def cached_export_path(weights: Path, imgsz: ImgSize, half: bool, cache_dir: Path) -> Path:
    """Where the service keeps its automatic export of ``weights`` (keyed by content)."""
    import hashlib

    digest = file_digest(weights) if weights.is_file() else hashlib.sha256(str(weights).encode()).hexdigest()[:12]
    tag = f"{weights.stem}-{format_imgsz(imgsz)}-{'fp16' if half else 'fp32'}-dyn-{digest}.onnx"
    return cache_dir / tag
