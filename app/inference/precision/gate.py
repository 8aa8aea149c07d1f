"""The precision gate: a reduced-precision model is served only if it still sees what fp32 sees.

It always runs, for every precision other than fp32, on the frames the service would see,
each at its aspect's shape, exactly as the service runs them:

* **labelled** (``GateOptions.dataset``, a YOLO folder): COCO mAP50-95 of both models
  (``campusguard eval``'s code); it passes when the loss is at most ``max_map_drop`` (0.01).
* **unlabelled** (the calibration frames): F1 agreement of its detections with fp32's at
  ``f1_conf`` (class-aware, IoU >= 0.5), at least the precision's floor
  (``spec.DEFAULT_MIN_F1``). Good int8 models agree 0.94-0.95 there, not 1.0, so this mode
  catches gross failures (a broken quantisation, wrong outputs), not a point of mAP.

A model that fails is not served: the service keeps fp32 and says so (``/health``, the log,
``campusguard_precision_fallback``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from app.inference.pipeline import DetectParams, Pipeline
from app.inference.precision.agreement import as_boxes, f1_agreement
from app.inference.precision.spec import DEFAULT_MAX_MAP_DROP, min_f1

Progress = Callable[[str], None]


@dataclass(frozen=True)
class GateOptions:
    dataset: Path | None = None  # labelled YOLO folder: the mAP gate
    frames: tuple[Path, ...] = ()  # unlabelled frames (the calibration frames): the F1 gate
    max_map_drop: float = DEFAULT_MAX_MAP_DROP
    min_f1: float | None = None  # None: the precision's default (spec.DEFAULT_MIN_F1)
    f1_conf: float = 0.4
    f1_iou: float = 0.5


@dataclass(frozen=True)
class GateVerdict:
    precision: str
    passed: bool
    mode: str  # "labelled" (mAP) | "unlabelled" (F1 against fp32)
    metric: str  # "map50_95_drop" | "f1"
    value: float
    threshold: float
    images: int
    reference_map: float | None = None
    candidate_map: float | None = None
    seconds: float = 0.0

    @property
    def summary(self) -> str:
        sign = "<=" if self.metric == "map50_95_drop" else ">="
        verdict = "passed" if self.passed else "FAILED"
        maps = (f" (fp32 {self.reference_map:.4f}, {self.precision} {self.candidate_map:.4f})"
                if self.reference_map is not None and self.candidate_map is not None else "")
        return (f"{self.precision} gate {verdict}: {self.metric} {self.value:.4f}{maps}, needs {sign} "
                f"{self.threshold:g}, {self.mode}, {self.images} images")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"summary": self.summary}


def run_gate(reference: Pipeline, candidate: Pipeline, precision: str, options: GateOptions,
             progress: Progress = lambda _: None) -> GateVerdict:
    """Compare ``candidate`` with the fp32 ``reference`` (both pipelines built over the same
    shapes) and decide."""
    import time

    started = time.perf_counter()
    if options.dataset is not None:
        verdict = _labelled(reference, candidate, precision, options, progress)
    else:
        verdict = _unlabelled(reference, candidate, precision, options, progress)
    return GateVerdict(**(asdict(verdict) | {"seconds": round(time.perf_counter() - started, 1)}))


def _labelled(reference: Pipeline, candidate: Pipeline, precision: str, options: GateOptions,
              progress: Progress) -> GateVerdict:
    from app.inference.accuracy import evaluate, load_dataset

    if options.dataset is None:
        raise ValueError("the labelled gate needs a dataset")
    dataset = load_dataset(options.dataset)
    scores = []
    for name, pipeline in (("fp32", reference), (precision, candidate)):
        progress(f"gating {precision}: mAP of {name} on {len(dataset.images)} labelled images ({options.dataset})")
        scores.append(evaluate(pipeline, dataset, progress=False).map50_95)
    drop = scores[0] - scores[1]
    return GateVerdict(precision, drop <= options.max_map_drop, "labelled", "map50_95_drop", round(drop, 4),
                       options.max_map_drop, len(dataset.images), round(scores[0], 4), round(scores[1], 4))


def _unlabelled(reference: Pipeline, candidate: Pipeline, precision: str, options: GateOptions,
                progress: Progress) -> GateVerdict:
    if not options.frames:
        raise ValueError("the unlabelled gate needs frames")
    params = DetectParams(conf=options.f1_conf)
    blobs = [path.read_bytes() for path in options.frames]
    found = []
    for name, pipeline in (("fp32", reference), (precision, candidate)):
        progress(f"gating {precision}: detections of {name} on {len(blobs)} frames (no labels: F1 against fp32)")
        found.append([as_boxes(d) for d in pipeline.detect(blobs, params)])
    f1 = f1_agreement(found[0], found[1], options.f1_iou)
    floor = min_f1(precision, options.min_f1)
    return GateVerdict(precision, f1 >= floor, "unlabelled", "f1", round(f1, 4), floor, len(blobs))
