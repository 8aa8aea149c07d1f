"""OpenVINO IR built from the configured ``.pt``, one folder per weights hash, shape and precision.

Ultralytics' own converter does the work (``torch2openvino``: trace, ``ov.convert_model``,
and for int8 ``nncf.quantize`` with its ignored scope on the Detect head's box decoding and
DFL, without which int8 loses 4 mAP points: issue #32). We only feed it our frames: the
calibration set decoded and letterboxed exactly as the service does, not Ultralytics'
dataloader. The IR goes to the service's cache folder (``/models`` may be read-only), is
written to a hidden temporary folder and renamed into place, and is built under the same
cross-replica lock as the int8 ONNX models (``precision/build.py``).

Nothing phones home: ``import_openvino`` hides ``openvino_telemetry`` from the process before
OpenVINO or NNCF is imported, so both fall back to their no-op telemetry stubs.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from app.core.errors import ConfigError
from app.core.imgsz import format_imgsz
from app.inference.precision.build import build_lock, frames_key, weights_key

Progress = Callable[[str], None]
META = "campusguard.json"  # beside model.xml: names, shape, precision, the source weights' hash
IR_PRECISION = {"fp32": "fp32", "bf16": "fp32", "int8": "int8"}  # bf16 is a runtime hint on the fp32 IR


def exporter_int8(model, example, out: Path, dataset) -> None:
    """Ultralytics' int8 recipe: NNCF with the ignored scope on the Detect head (every Sigmoid,
    the box decoding, DFL) kept in float."""
    from ultralytics.utils.export.openvino import torch2openvino

    torch2openvino(model, example, output_dir=out, dynamic=False, quantize=8, calibration_dataset=dataset,
                   int8_detect=True)


# How an int8 IR is quantised: name -> builder(model, example input, output folder, nncf.Dataset).
# The name is part of the IR's cache key. One recipe today; issue #32's MOC + NNCF recipe would be
# a second row, picked per shape by measured mAP. The precision gate judges whatever a recipe made.
INT8_RECIPES: dict[str, Callable[..., None]] = {"exporter": exporter_int8}
INT8_RECIPE = "exporter"


def import_openvino() -> ModuleType:
    """``openvino`` with telemetry off for this process (OpenVINO's converter and NNCF send
    usage statistics unless ``openvino_telemetry`` is importable and opted out)."""
    # Before the first import of openvino or nncf: their `import openvino_telemetry` then fails
    # and each uses its stub (NNCF would otherwise send without asking: no consent file = yes).
    sys.modules.setdefault("openvino_telemetry", None)  # type: ignore[arg-type]
    try:
        import openvino
    except ImportError as exc:
        if getattr(exc, "name", None) == "openvino":  # not installed at all
            raise ConfigError("CAMPUSGUARD_BACKEND=openvino needs the openvino extra: pip install -e '.[openvino]' "
                              "(make setup installs it)") from None
        raise ConfigError(f"openvino is installed but does not import ({exc}); reinstall the openvino extra: "
                          "pip install --force-reinstall -e '.[openvino]'") from None
    return openvino


def ir_folder(cache_dir: Path, weights: Path, shape: tuple[int, int], precision: str,
              frames: tuple[Path, ...] = ()) -> Path:
    """Where the IR of ``weights`` at ``shape`` lives: keyed by the weights' content, the shape,
    the IR's precision and, for int8, the calibration frames."""
    kind = IR_PRECISION[precision]
    tail = f"-{INT8_RECIPE}-{frames_key(frames)}" if kind == "int8" else ""
    return cache_dir / "openvino" / f"{weights.stem}-{format_imgsz(shape)}-{kind}-{weights_key(weights)}{tail}"


def ensure_ir(weights: Path, shape: tuple[int, int], precision: str, cache_dir: Path, frames: tuple[Path, ...] = (),
              progress: Progress = lambda _: None, label: str = "") -> Path:
    """The IR folder for ``weights`` at ``shape`` (built now unless it, or another replica,
    already did); its ``model.xml`` is what the runtime compiles."""
    if IR_PRECISION[precision] == "int8" and not frames:
        raise ConfigError("int8 needs calibration frames: set CAMPUSGUARD_CALIBRATION_DIR to a folder of frames from "
                          "your cameras (a few dozen to a few hundred)")
    folder = ir_folder(cache_dir, weights, shape, precision, frames)
    if (folder / "model.xml").is_file():
        return folder
    with build_lock(folder, progress, f"OpenVINO build{label}"):
        if (folder / "model.xml").is_file():
            return folder
        tmp = folder.with_name(f".{folder.name}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            _build(weights, shape, IR_PRECISION[precision], frames, tmp, progress, label)
            os.replace(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return folder


def read_meta(folder: Path) -> dict:
    return json.loads((folder / META).read_text())


def _build(weights: Path, shape: tuple[int, int], kind: str, frames: tuple[Path, ...], out: Path,
           progress: Progress, label: str) -> None:
    import_openvino()
    import torch

    try:
        from ultralytics.utils.export.openvino import torch2openvino
    except ImportError:
        raise ConfigError("this Ultralytics has no torch2openvino (ultralytics.utils.export.openvino); "
                          "upgrade ultralytics to 8.4 or later") from None
    model = _export_model(weights, shape)
    dataset = None
    if kind == "int8":
        dataset = _calibration(frames, shape, progress, label)
    progress(f"building the OpenVINO {kind} IR{label}" + (f" (calibrating on {len(frames)} frames)" if dataset else ""))
    saved_threads = torch.get_num_threads()
    # NNCF draws rich progress bars on stdout, which carries a command's results; its log says every op it skips.
    logging.getLogger("nncf").setLevel(logging.WARNING)
    with contextlib.redirect_stdout(io.StringIO()):
        if kind == "int8":
            INT8_RECIPES[INT8_RECIPE](model, torch.zeros(1, 3, *shape), out, dataset)
        else:
            torch2openvino(model, torch.zeros(1, 3, *shape), output_dir=out, dynamic=False)
    torch.set_num_threads(saved_threads)
    meta = {"names": {int(k): str(v) for k, v in model.names.items()}, "shape": list(shape), "precision": kind,
            "weights": str(weights), "weights_sha256_12": weights_key(weights), "calibration_frames": len(frames)}
    if kind == "int8":
        meta["int8_recipe"] = INT8_RECIPE
    (out / META).write_text(json.dumps(meta, indent=1))


def _export_model(weights: Path, shape: tuple[int, int]):
    """The network as Ultralytics' exporter prepares it: fused, eval, fp32, the Detect head in
    export mode (one (N, 4 + nc, anchors) output, fixed anchors)."""
    from ultralytics.nn.modules import Detect

    from app.inference.backends.models import check_stride, load_detection_model

    model = load_detection_model(weights)
    check_stride(model, shape if shape[0] != shape[1] else shape[0])
    model = model.float().fuse().eval()
    for param in model.parameters():
        param.requires_grad_(False)
    for module in model.modules():
        if isinstance(module, Detect):
            # Ultralytics declares ``format = None`` on the class, so its type reads as None
            module.export, module.format, module.dynamic = True, "openvino", False  # type: ignore[assignment]
    return model


def _calibration(frames: tuple[Path, ...], shape: tuple[int, int], progress: Progress, label: str):
    """An ``nncf.Dataset`` of the frames, decoded and letterboxed the service's way."""
    import nncf

    from app.inference.precision.quantize import letterboxed_frames
    from app.inference.vision.preprocess import to_batch

    progress(f"reading {len(frames)} calibration frames{label}")
    boxed = letterboxed_frames(list(frames), shape, progress=False)
    return nncf.Dataset(boxed, lambda frame: to_batch([frame]))
