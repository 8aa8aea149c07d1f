"""The synchronous detection pipeline: decode -> letterbox -> infer -> NMS -> pixels.

Usable as a library (``Pipeline.detect``), by the CLI (eval, bench) and by the HTTP engine,
which calls the stages separately so it can batch across requests. It owns the periodic
allocator-cache release: the migration's OOM came from memory creeping over thousands of
frames, and releasing the cache every N inferences bounds it.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

import numpy as np

from app.core.types import Counters, Detection
from app.inference.backends.base import Detector
from app.inference.vision.decode import decode_image
from app.inference.vision.postprocess import Detections, postprocess
from app.inference.vision.preprocess import Letterbox, letterbox, to_batch


@dataclass(frozen=True, slots=True)
class DetectParams:
    conf: float = 0.25
    iou: float = 0.7
    max_det: int = 300
    classes: frozenset[int] | None = None
    multi_label: bool = False


@dataclass(slots=True)
class Prepared:
    """One image ready for the model, with what is needed to map boxes back.

    ``letterboxed`` stays HWC uint8 (a quarter of the float size while it waits in the
    queue); it becomes float only when written into the batch buffer.
    """

    letterboxed: np.ndarray
    letterbox: Letterbox
    decode_ms: float = 0.0
    preprocess_ms: float = 0.0
    image: np.ndarray | None = None  # decoded RGB frame, kept only when asked (rules, annotation)


class Pipeline:
    def __init__(self, detector: Detector, cache_clear_every: int = 500, max_pixels: int = 40_000_000) -> None:
        self.detector = detector
        self.cache_clear_every = cache_clear_every
        self.max_pixels = max_pixels
        self.counters = Counters()
        self._lock = threading.Lock()
        self._infer_lock = threading.Lock()
        self._buffer: np.ndarray | None = None


    # --- stages -------------------------------------------------------------------------
    def prepare(self, data: bytes | np.ndarray, keep_image: bool = False) -> Prepared:
        """Decode (bytes) and letterbox. Thread-safe; OpenCV releases the GIL here."""
        t0 = time.perf_counter()
        img = decode_image(data, self.max_pixels) if isinstance(data, (bytes, bytearray, memoryview)) else data
        t1 = time.perf_counter()
        boxed, box = letterbox(img, self.detector.imgsz)
        t2 = time.perf_counter()
        return Prepared(boxed, box, (t1 - t0) * 1e3, (t2 - t1) * 1e3, img if keep_image else None)

    def infer(self, images: list[np.ndarray]) -> np.ndarray:
        """One forward call on letterboxed images; counts it and releases the cache every N calls."""
        with self._infer_lock:  # one reusable batch buffer: calls are serialised (one worker anyway)
            n = len(images)
            h, w = images[0].shape[:2]
            if self._buffer is None or self._buffer.shape[0] < n or self._buffer.shape[2:] != (h, w):
                self._buffer = np.empty((max(n, 8), 3, h, w), np.float32)
            out = self.detector.infer(to_batch(images, self._buffer[:n]))
        self.after_inference(n)
        return out

    def after_inference(self, images: int) -> None:
        with self._lock:
            self.counters.inferences += 1
            self.counters.images += images
            due = self.cache_clear_every > 0 and self.counters.inferences % self.cache_clear_every == 0
        if due:
            self.release_cache()

    def release_cache(self) -> None:
        self.detector.release_cache()
        with self._lock:
            self.counters.cache_clears += 1
            self.counters.last_cache_clear = time.time()

    def finish(self, raw: np.ndarray, box: Letterbox, params: DetectParams) -> list[Detection]:
        """Head output of one image -> detections in original pixels."""
        dets = postprocess(raw, params.conf, params.iou, params.max_det, params.classes, multi_label=params.multi_label)
        return self.to_detections(dets, box)

    def to_detections(self, dets: Detections, box: Letterbox) -> list[Detection]:
        boxes = box.to_original(dets.boxes)
        names = self.detector.names
        return [
            Detection(int(c), names.get(int(c), str(int(c))), float(s), *map(float, b))
            for b, s, c in zip(boxes, dets.scores, dets.class_ids)
        ]

    # --- convenience ----------------------------------------------------------------------
    def detect(self, images: list[bytes | np.ndarray], params: DetectParams | None = None,
               batch_size: int = 8) -> list[list[Detection]]:
        """Library entry point: many images in, one detection list per image out."""
        params = params or DetectParams()
        results: list[list[Detection]] = []
        for start in range(0, len(images), batch_size):
            prepared = [self.prepare(img) for img in images[start:start + batch_size]]
            raw = self.infer([p.letterboxed for p in prepared])
            results.extend(self.finish(r, p.letterbox, params) for r, p in zip(raw, prepared))
        return results
