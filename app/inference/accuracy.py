"""`campusguard eval`: COCO mAP of a backend over a YOLO-format folder.

Ground truth is converted from YOLO labels to COCO annotations in memory and scored with
faster-coco-eval (a maintained COCOeval); we write no mAP arithmetic of our own.
"""

from __future__ import annotations

import contextlib
import io
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml
from tqdm import tqdm

from app.core.errors import ConfigError
from app.inference.pipeline import DetectParams, Pipeline
from app.inference.vision.decode import image_files

EVAL_PARAMS = DetectParams(conf=0.001, iou=0.7, max_det=300, multi_label=True)  # as Ultralytics val


@dataclass(frozen=True)
class Dataset:
    root: Path
    names: dict[int, str]
    images: list[Path]

    def label_path(self, image: Path) -> Path:
        return self.root / "labels" / f"{image.stem}.txt"


@dataclass(frozen=True)
class EvalResult:
    backend: str
    provider: str
    images: int
    map50_95: float
    map50: float
    boxes: int


def load_dataset(root: Path) -> Dataset:
    root = Path(root)
    data_yaml = root / "data.yaml"
    if not data_yaml.is_file():
        raise ConfigError(f"{root} is not a YOLO dataset folder: {data_yaml} is missing")
    try:
        meta = yaml.safe_load(data_yaml.read_text())
        names = {int(k): str(v) for k, v in dict(meta["names"]).items()}
    except Exception as exc:
        raise ConfigError(f"{data_yaml} has no usable 'names' mapping: {exc}") from exc
    images = image_files(root / "images")
    if not images:
        raise ConfigError(f"no images under {root / 'images'}")
    return Dataset(root, names, images)


def read_labels(path: Path, width: int, height: int) -> list[tuple[int, list[float]]]:
    """YOLO label lines -> (class, COCO xywh in pixels); a missing file means no objects."""
    if not path.is_file():
        return []
    out = []
    for line_no, line in enumerate(path.read_text().splitlines(), 1):
        parts = line.split()
        if not parts:
            continue
        try:
            cls, cx, cy, w, h = int(parts[0]), *map(float, parts[1:5])
        except (ValueError, IndexError) as exc:
            raise ConfigError(f"{path}:{line_no}: malformed label line {line!r}") from exc
        out.append((cls, [(cx - w / 2) * width, (cy - h / 2) * height, w * width, h * height]))
    return out


def evaluate(pipeline: Pipeline, dataset: Dataset, batch_size: int = 1, progress: bool = True,
             params: DetectParams = EVAL_PARAMS, shape: tuple[int, int] | None = None,
             transform: Callable[[bytes], bytes] | None = None,
             on_image: Callable[[str, list], None] = lambda name, detections: None,
             class_map: Mapping[int, int] | None = None) -> EvalResult:
    """mAP the way the service runs: each image at its aspect's shape (``shape`` forces one
    for all); ``transform`` rewrites each image's bytes first (e.g. an up-scaled copy);
    ``on_image(file name, detections)`` sees each image's detections (``eval --save-predictions``);
    ``class_map`` (model class id -> dataset class id): only those classes are scored, for a
    model whose classes differ from the set's (a rollout's candidate, app/wiring/rollout.py)."""
    from faster_coco_eval import COCO, COCOeval_faster

    images: list[dict] = []
    annotations: list[dict] = []
    detections: list[dict] = []
    scored = set(class_map.values()) if class_map is not None else set(dataset.names)
    bar = tqdm(total=len(dataset.images), desc="eval", unit="img", file=sys.stderr, disable=not progress)
    for start in range(0, len(dataset.images), batch_size):
        paths = dataset.images[start:start + batch_size]
        blobs = [transform(p.read_bytes()) if transform else p.read_bytes() for p in paths]
        results = pipeline.detect(blobs, params, batch_size=batch_size, shape=shape)
        for offset, (path, blob, dets) in enumerate(zip(paths, blobs, results, strict=True)):
            on_image(path.name, dets)
            image_id = start + offset + 1
            height, width = pipeline_shape(blob)
            images.append({"id": image_id, "file_name": path.name, "width": width, "height": height})
            for cls, xywh in read_labels(dataset.label_path(path), width, height):
                if class_map is not None and cls not in scored:
                    continue
                annotations.append({"id": len(annotations) + 1, "image_id": image_id, "category_id": cls,
                                    "bbox": xywh, "area": xywh[2] * xywh[3], "iscrowd": 0})
            for d in dets:
                if class_map is not None and d.class_id not in class_map:
                    continue
                category = class_map[d.class_id] if class_map is not None else d.class_id
                detections.append({"image_id": image_id, "category_id": category, "score": d.confidence,
                                   "bbox": [d.x1, d.y1, d.x2 - d.x1, d.y2 - d.y1]})
        bar.update(len(paths))
    bar.close()
    gt = {"images": images, "annotations": annotations,
          "categories": [{"id": k, "name": v} for k, v in dataset.names.items() if k in scored]}
    with contextlib.redirect_stdout(io.StringIO()):  # COCOeval prints its table to stdout
        coco_gt = COCO(gt)
        coco_dt = coco_gt.loadRes(detections) if detections else None
        if coco_dt is None:
            return EvalResult(pipeline.detector.backend, pipeline.detector.provider, len(images), 0.0, 0.0,
                              len(annotations))
        evaluator = COCOeval_faster(coco_gt, coco_dt, "bbox")
        evaluator.evaluate()
        evaluator.accumulate()
        evaluator.summarize()
    stats = evaluator.stats
    return EvalResult(pipeline.detector.backend, pipeline.detector.provider, len(images),
                      float(stats[0]), float(stats[1]), len(annotations))


def upscaled(width: int, quality: int = 90) -> Callable[[bytes], bytes]:
    """A transform: the image resized (cubic) to ``width`` pixels wide and re-encoded as JPEG,
    in memory, so a val set becomes camera-sized frames with the same (normalised) labels."""
    import cv2
    import numpy as np

    def transform(data: bytes) -> bytes:
        img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
        if img is None:
            raise ValueError("not a decodable image")
        height = round(img.shape[0] * width / img.shape[1])
        ok, buf = cv2.imencode(".jpg", cv2.resize(img, (width, height), interpolation=cv2.INTER_CUBIC),
                               [cv2.IMWRITE_JPEG_QUALITY, quality])
        return buf.tobytes()

    return transform


def pipeline_shape(data: bytes | Path) -> tuple[int, int]:
    """(height, width) of the image as the pipeline sees it (EXIF orientation applied),
    from the header without decoding pixels."""
    from app.inference.vision.decode import read_header

    width, height, orientation = read_header(data if isinstance(data, bytes) else Path(data).read_bytes())
    return (width, height) if orientation in (5, 6, 7, 8) else (height, width)
