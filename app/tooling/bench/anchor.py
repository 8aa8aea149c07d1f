"""The CPU anchor of ``campusguard bench --stage service``: Ultralytics on its own OpenVINO int8 export.

Issue #32: what a CPU user who leaves us gets is not the Ultralytics torch loop but
``YOLO(pt).export(format="openvino", int8=True)`` and ``predict`` on it. The anchor is exactly
that, at the server's 16:9 shape: Ultralytics' exporter (NNCF, its own ignored scope), calibrated
on a labelled YOLO folder (coco-val128 here) through a data yaml we write, then
``predict(jpeg_path)`` (Ultralytics decodes the file itself) in this process, default threads.

The export is built offline into the bench's cache folder, never beside the weights (``/models``
may be read-only): the ``.pt`` is copied into a folder keyed by its hash, the shape and the
calibration set, and exported there once, under the same cross-process lock as the service's
builds. Nothing is fetched: the data yaml is ours (no ``coco8.yaml``), YOLO_OFFLINE is set, and
Ultralytics' font check, which would ask GitHub for Arial.ttf while loading the data yaml (only its
plots use the font), is switched off for the export.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import yaml

from app.core.imgsz import format_imgsz
from app.inference.precision.build import build_lock, weights_key

Progress = Callable[[str], None]


def labelled_folder(images: Path) -> Path:
    """The YOLO dataset folder of an ``images`` folder (its parent when it has ``labels``)."""
    return images.parent if images.name == "images" and (images.parent / "labels").is_dir() else images


@contextlib.contextmanager
def offline_export() -> Iterator[None]:
    """No network during Ultralytics' export: offline mode, and no font download for plots."""
    import ultralytics.data.utils as data_utils

    saved_env, saved_font = os.environ.get("YOLO_OFFLINE"), data_utils.check_font
    os.environ["YOLO_OFFLINE"] = "1"
    data_utils.check_font = lambda *_a, **_k: None  # would HEAD github.com for Arial.ttf
    try:
        yield
    finally:
        data_utils.check_font = saved_font
        if saved_env is None:
            os.environ.pop("YOLO_OFFLINE", None)
        else:
            os.environ["YOLO_OFFLINE"] = saved_env


def anchor_model(weights: Path, shape: tuple[int, int], dataset: Path, cache_dir: Path,
                 progress: Progress = lambda _: None) -> Path:
    """The folder of Ultralytics' OpenVINO int8 export of ``weights`` at ``shape`` (built once)."""
    from ultralytics import YOLO

    from app.inference.precision.build import frames_key
    from app.inference.vision.decode import image_files

    images = dataset / "images" if (dataset / "images").is_dir() else dataset
    frames = tuple(image_files(images))
    key = f"{weights.stem}-{format_imgsz(shape)}-int8-{weights_key(weights)}-{frames_key(frames)}"
    folder = cache_dir / "anchor" / key
    model_dir = folder / f"{weights.stem}_int8_openvino_model"
    if (model_dir / f"{weights.stem}.xml").is_file():
        return model_dir
    with build_lock(folder, progress, "Ultralytics' OpenVINO int8 export (the anchor)"):
        if (model_dir / f"{weights.stem}.xml").is_file():
            return model_dir
        folder.mkdir(parents=True, exist_ok=True)
        local = folder / weights.name
        shutil.copyfile(weights, local)
        model = YOLO(str(local), task="detect")
        data = folder / "data.yaml"  # our own: Ultralytics' default for int8 would be coco8.yaml (a download)
        data.write_text(yaml.safe_dump({"path": str(dataset.resolve()), "train": str(images.resolve()),
                                        "val": str(images.resolve()), "names": dict(model.names)}))
        progress(f"building the anchor: Ultralytics' OpenVINO int8 export at {format_imgsz(shape)} "
                 f"(calibrating on {len(frames)} frames of {dataset})")
        with offline_export():
            out = Path(model.export(format="openvino", int8=True, imgsz=list(shape), data=str(data), batch=1,
                                    verbose=False))
        local.unlink(missing_ok=True)
        if out.resolve() != model_dir.resolve():
            raise RuntimeError(f"Ultralytics exported to {out}, expected {model_dir}")
    return model_dir


def anchor_step(model_dir: Path, jpeg: Path, shape: tuple[int, int]) -> Callable[[], int]:
    """One ``predict(jpeg_path)`` on the export (Ultralytics decodes, letterboxes and runs NMS)."""
    from ultralytics import YOLO

    model = YOLO(str(model_dir), task="detect")

    def step() -> int:
        model.predict(str(jpeg), imgsz=list(shape), verbose=False)
        return 1

    return step
