"""`campusguard export`: a fixed-shape, simplified ONNX model with names and size inside.

Ultralytics' exporter does the tracing and onnxslim simplification; we then pin the
spatial input dims to ``imgsz`` (one fixed shape, the migration's memory lesson) and
record our own metadata so the onnx backend needs nothing but the file. With
``dynamic_batch`` only the batch axis stays symbolic, so micro-batches of any size run
in one call; otherwise the batch is fixed to ``batch``.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from app.errors import ConfigError

META_IMGSZ = "campusguard_imgsz"
META_DYNAMIC_BATCH = "campusguard_dynamic_batch"


def export_onnx(
    weights: Path,
    out: Path,
    imgsz: int = 640,
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
    if imgsz < 32:
        raise ConfigError(f"--imgsz must be at least 32, got {imgsz}")
    if device != "cpu":  # a clear DeviceError now, not the exporter's traceback later
        from app.devices import torch_inventory, validate_device

        validate_device(device, torch_inventory())
    weights = Path(weights)
    is_arch = weights.suffix.lower() in {".yaml", ".yml"}
    if not is_arch and not weights.is_file():
        raise ConfigError(f"weights file not found: {weights}")
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    saved_threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory(prefix="campusguard-export-") as tmp:
        # Ultralytics writes next to its input; the weights may live on a read-only mount.
        src = weights if is_arch else Path(shutil.copy2(weights, Path(tmp) / weights.name))
        model = YOLO(str(src), task="detect")
        # Ultralytics silently rounds imgsz up to a stride multiple and traces that size;
        # pinning the input to the requested size then gives a graph that cannot run.
        stride = int(max(getattr(model.model, "stride", [32])))
        if imgsz % stride:
            raise ConfigError(f"--imgsz {imgsz} is not a multiple of the model's stride {stride} "
                              f"(try {-(-imgsz // stride) * stride})")
        produced = model.export(
            format="onnx", imgsz=imgsz, half=half, batch=batch, dynamic=dynamic_batch,
            simplify=True, device=device, verbose=False,
        )
        proto = onnx.load(str(produced))
    torch.set_num_threads(threads or saved_threads)  # the exporter's select_device changes it
    _pin_spatial_dims(proto, imgsz)
    _set_metadata(proto, {META_IMGSZ: str(imgsz), META_DYNAMIC_BATCH: str(bool(dynamic_batch)).lower()})
    onnx.checker.check_model(proto)
    onnx.save(proto, str(out))
    return out


def _pin_spatial_dims(proto, imgsz: int) -> None:
    """Fix H and W of the image input: one shape for every frame."""
    dims = proto.graph.input[0].type.tensor_type.shape.dim
    for axis in (2, 3):
        dims[axis].ClearField("dim_param")
        dims[axis].dim_value = imgsz


def _set_metadata(proto, values: dict[str, str]) -> None:
    existing = {prop.key: prop for prop in proto.metadata_props}
    for key, value in values.items():
        if key in existing:
            existing[key].value = value
        else:
            entry = proto.metadata_props.add()
            entry.key, entry.value = key, value


def cached_export_path(weights: Path, imgsz: int, half: bool, cache_dir: Path) -> Path:
    """Where the service keeps its automatic export of ``weights`` (keyed by content)."""
    import hashlib

    h = hashlib.sha256()
    if weights.is_file():
        with weights.open("rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    else:
        h.update(str(weights).encode())
    tag = f"{weights.stem}-{imgsz}-{'fp16' if half else 'fp32'}-dyn-{h.hexdigest()[:12]}.onnx"
    return cache_dir / tag
