"""`campusguard export --int8`: quantise, measure against fp32, and ship only if it holds up.

An int8 model that lost accuracy fails silently in production (fewer, worse boxes, no
error), so the export itself is the gate: when the calibration folder has labels, both
models are scored with `campusguard eval`'s code and the int8 file is moved into place
only when mAP50-95 dropped by at most ``max_drop``. Until then it lives in a temporary
file next to ``out``, so a refusal (or a crash) leaves no model behind.
"""

from __future__ import annotations

import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.config import Settings
from app.core.errors import ConfigError
from app.core.imgsz import ImgSize, format_imgsz, input_hw
from app.inference.accuracy import Dataset, evaluate, load_dataset
from app.inference.precision.quantize import (
    META_PRECISION,
    FrameReader,
    Recipe,
    YoloOnnx,
    calibration_images,
    inspect_yolo_onnx,
    letterboxed_frames,
    quantize,
)

DEFAULT_CALIBRATION = Path("../shared/datasets/coco-val128")


@dataclass(frozen=True)
class Score:
    map50_95: float
    map50: float

DEFAULT_RECIPE = Recipe()  # frozen, so one shared default is safe


@dataclass(frozen=True)
class Int8Result:
    """What the export did; ``accepted`` False means nothing was written to ``out``."""

    out: Path
    imgsz: ImgSize
    calibration_images: int
    recipe: Recipe
    fp32_bytes: int
    int8_bytes: int
    fp32: Score | None  # None: the calibration folder has no labels, accuracy not checked
    int8: Score | None
    max_drop: float
    eval_images: int = 0

    @property
    def drop(self) -> float | None:
        return None if self.fp32 is None or self.int8 is None else self.fp32.map50_95 - self.int8.map50_95

    @property
    def accepted(self) -> bool:
        return self.drop is None or self.drop <= self.max_drop


def labelled_dataset(folder: Path) -> Dataset | None:
    """The calibration folder as a YOLO dataset when it is one (data.yaml + labels/)."""
    folder = Path(folder)
    if not (folder / "data.yaml").is_file() or not (folder / "labels").is_dir():
        return None
    return load_dataset(folder)


def export_int8(weights: Path, out: Path, calibration: Path = DEFAULT_CALIBRATION, calib_images: int | None = None,
                max_drop: float = 0.01, imgsz: ImgSize | None = None, batch: int = 1, dynamic_batch: bool = False,
                recipe: Recipe = DEFAULT_RECIPE, threads: int | None = None, progress: bool = True,
                eval_data: Path | None = None) -> Int8Result:
    """Quantise ``weights`` (.pt/.yaml, exported first, or a YOLO fp32 .onnx) to ``out``.

    ``eval_data`` (a labelled YOLO folder) is scored instead of the calibration folder:
    frames the int8 ranges were fitted on flatter it (docs/benchmarks.md measures by how much).
    """
    from tqdm import tqdm

    if not -1.0 <= max_drop <= 1.0:
        raise ConfigError(f"--max-drop is a difference of mAP50-95 (0..1), got {max_drop}")
    out = Path(out)
    # Everything cheap is checked before the minutes of export and calibration.
    images = calibration_images(calibration, calib_images)
    dataset = load_dataset(eval_data) if eval_data is not None else labelled_dataset(calibration)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="campusguard-int8-") as tmp:
        fp32 = _fp32_source(Path(weights), Path(tmp), imgsz, batch, dynamic_batch, threads)
        frames = letterboxed_frames(images, fp32.imgsz, progress=progress)
        staged = out.with_name(f".{out.stem}.{os.getpid()}.staged.onnx")  # .onnx: the backend loads it
        try:
            with tqdm(total=len(frames), desc="calibrate int8", unit="img", file=sys.stderr,
                      disable=not progress) as bar:
                quantize(fp32, staged, FrameReader(frames, fp32.input_name, fp32.batch or 1, bar.update), recipe)
            scores: tuple[Score | None, Score | None] = (None, None)
            if dataset is not None:
                scores = (_score(fp32.path, fp32.imgsz, dataset, threads, progress),
                          _score(staged, fp32.imgsz, dataset, threads, progress))
            result = Int8Result(out, fp32.imgsz, len(frames), recipe, fp32.path.stat().st_size,
                                staged.stat().st_size, *scores, max_drop=max_drop,
                                eval_images=len(dataset.images) if dataset else 0)
            if result.accepted:
                os.replace(staged, out)
            return result
        finally:
            staged.unlink(missing_ok=True)


def _fp32_source(weights: Path, tmp: Path, imgsz: ImgSize | None, batch: int, dynamic_batch: bool,
                 threads: int | None) -> YoloOnnx:
    """The fp32 ONNX model to quantise: the given YOLO export, or a fresh export of a .pt."""
    if weights.suffix.lower() == ".onnx":
        fp32 = inspect_yolo_onnx(weights)
        precision = _metadata(weights).get(META_PRECISION, "fp32")
        if precision != "fp32":
            raise ConfigError(f"{weights} is already a {precision} model; quantise its fp32 export")
        if imgsz is not None and input_hw(imgsz) != input_hw(fp32.imgsz):
            raise ConfigError(f"{weights} was exported for imgsz {format_imgsz(fp32.imgsz)}, "
                              f"not {format_imgsz(imgsz)}; export it again at that size")
        return fp32
    from app.inference.export import export_onnx

    path = export_onnx(weights, tmp / f"{weights.stem}-fp32.onnx", imgsz=imgsz or 640, batch=batch,
                       dynamic_batch=dynamic_batch, threads=threads)
    return inspect_yolo_onnx(path)


def _metadata(path: Path) -> dict[str, str]:
    import onnx

    return {p.key: p.value for p in onnx.load(str(path), load_external_data=False).metadata_props}


def _score(model: Path, imgsz: ImgSize, dataset: Dataset, threads: int | None, progress: bool) -> Score:
    """mAP of one ONNX model through the service's own backend and pipeline."""
    from app import wiring

    fields: dict[str, Any] = {"backend": "onnx", "weights": model, "imgsz": imgsz, "device": "cpu"}
    if threads:
        fields["threads"] = threads
    settings = Settings(**fields)
    detector = wiring.load_detector(settings)
    try:
        result = evaluate(wiring.build_pipeline(settings, detector), dataset,
                          progress=progress)
    finally:
        detector.close()
    return Score(result.map50_95, result.map50)
