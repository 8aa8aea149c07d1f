"""The synchronous detection pipeline: decode -> letterbox -> infer -> NMS -> pixels.

Usable as a library (``Pipeline.detect``), by the CLI (eval, bench) and by the HTTP engine,
which calls the stages separately so it can batch across requests. Each frame goes to the
fixed input shape of its aspect class (``app.inference.vision.shapes``), and a JPEG that the
letterbox shrinks by half or more is decoded at that reduced size (libjpeg-turbo's DCT
scaling): boxes are still mapped back to the original frame's pixels. With a device decoder
(``app/inference/device_decode.py``, chosen at startup) a JPEG is only probed here: it waits in
the queue as a ``Pending`` frame and is decoded and letterboxed on the device with its batch,
in ``infer``. It owns the periodic
allocator-cache release: the migration's OOM came from memory creeping over thousands of
frames, and releasing the cache every N inferences bounds it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol, cast

import numpy as np

from app.core.errors import ServiceError
from app.core.imgsz import input_hw
from app.core.types import Counters, Detection
from app.inference.backends.base import Detector, lanes_of
from app.inference.decoding import DecoderInfo, FallbackBook
from app.inference.vision.candidates import Candidates, compact
from app.inference.vision.decode import Header, decode_pixels, probe, reduction_for
from app.inference.vision.postprocess import Detections, postprocess
from app.inference.vision.preprocess import Letterbox, letterbox, to_batch
from app.inference.vision.shapes import Shape, choose_shape, letterbox_scale

Keep = Literal["none", "evidence", "full"]  # what of the decoded frame a caller needs afterwards


@dataclass(frozen=True, slots=True)
class DetectParams:
    conf: float = 0.25
    iou: float = 0.7
    max_det: int = 300
    classes: frozenset[int] | None = None
    multi_label: bool = False


@dataclass(frozen=True, slots=True)
class DecodePolicy:
    """How small a JPEG may be decoded. ``reduce`` off decodes every frame at full size;
    ``evidence_min_width`` is the least width of a frame kept for snapshots and clips."""

    reduce: bool = True
    evidence_min_width: int = 960


@dataclass(eq=False, slots=True)
class Pending:
    """A probed JPEG waiting in the queue for its batch's device decode (``FrameDecoder.defer``);
    the decoder fills in its ``prepared`` (the host frame when kept, timings, or the error)."""

    data: bytes
    header: Header
    target: Shape
    keep: Keep  # what of the frame comes back to the host (``Pipeline.prepare``)
    reduction: int  # the host decode's reduction for this frame: the kept evidence frame's size
    prepared: Prepared | None = None

    @property
    def shape(self) -> tuple[int, int, int]:
        """As the letterboxed array's: the batcher groups pending and decoded frames alike."""
        return self.target[0], self.target[1], 3


@dataclass(slots=True)
class Prepared:
    """One image ready for the model, with what is needed to map boxes back.

    ``letterboxed`` stays HWC uint8 (a quarter of the float size while it waits in the
    queue); it becomes float only when written into the batch buffer (or on the device). With a
    device decoder it is a ``Pending`` JPEG until its batch is decoded.
    """

    letterboxed: np.ndarray | Pending
    letterbox: Letterbox
    decode_ms: float = 0.0
    preprocess_ms: float = 0.0
    image: np.ndarray | None = None  # decoded RGB frame, kept only when asked (rules, annotation)
    reduction: int = 1  # the JPEG was decoded at 1/reduction of its size
    error: ServiceError | None = None  # a deferred frame no decoder could read (invalid_image)

    @property
    def shape(self) -> Shape:
        return self.letterboxed.shape[0], self.letterboxed.shape[1]


class FrameDecoder(Protocol):
    """What decodes JPEGs on the device (``app/inference/device_decode.py``); ``HostDecoder``, the
    default, takes none and leaves every frame to the host path of ``Pipeline.prepare``."""

    info: DecoderInfo
    fallbacks: FallbackBook

    def takes(self, data: bytes, header: Header) -> bool:
        """Whether this frame is decoded on the device (a refusal is counted by reason)."""

    def defer(self, data: bytes, header: Header, target: Shape, keep: Keep, policy: DecodePolicy) -> Prepared:
        """The frame as a ``Pending`` one, its letterbox geometry computed from the header."""

    def letterbox_batch(self, images: Sequence[np.ndarray | Pending]) -> Any:
        """uint8 (N, H, W, 3) on the device: pending frames decoded in one call and letterboxed,
        decoded ones uploaded; a frame no decoder reads gets its ``prepared.error`` and grey."""

    def feeds(self, detector: Detector) -> bool:
        """Whether ``detector.candidates`` takes the device batch as it is (torch on that device)."""

    def to_host(self, batch: Any) -> np.ndarray: ...


class HostDecoder:
    """The null decoder: every frame is decoded on the host (OpenCV), as without a GPU."""

    def __init__(self, info: DecoderInfo | None = None) -> None:
        self.info = info or DecoderInfo("cpu", "cpu", "cpu", "set explicitly")
        self.fallbacks = FallbackBook()

    def takes(self, data: bytes, header: Header) -> bool:
        return False

    def defer(self, data: bytes, header: Header, target: Shape, keep: Keep, policy: DecodePolicy) -> Prepared:
        raise AssertionError("the host decoder defers nothing")

    def letterbox_batch(self, images: Sequence[np.ndarray | Pending]) -> Any:
        raise AssertionError("the host decoder has no pending frames")

    def feeds(self, detector: Detector) -> bool:
        return False

    def to_host(self, batch: Any) -> np.ndarray:
        return np.asarray(batch)


def detector_shapes(detector: Detector) -> tuple[Shape, ...]:
    """The fixed input shapes a detector was built and warmed for (its ``imgsz`` alone when it
    declares none)."""
    shapes = getattr(detector, "shapes", None)
    return tuple(shapes) if shapes else (input_hw(detector.imgsz),)


class Pipeline:
    def __init__(self, detector: Detector, cache_clear_every: int = 500, max_pixels: int = 40_000_000,
                 decode: DecodePolicy = DecodePolicy(), decoder: FrameDecoder | None = None) -> None:
        self.detector = detector
        self.decoder: FrameDecoder = decoder or HostDecoder()
        self.cache_clear_every = cache_clear_every
        self.max_pixels = max_pixels
        self.decode = decode
        self.shapes = detector_shapes(detector)
        self.counters = Counters()
        self.lanes = lanes_of(detector)
        self._lock = threading.Lock()
        # A detector of one lane is called by one thread at a time (torch); one of several
        # lanes takes concurrent calls (app/inference/lanes.py). Batch buffers are per thread.
        self._serial = threading.Lock() if self.lanes == 1 else contextlib.nullcontext()
        self._local = threading.local()

    # --- stages -------------------------------------------------------------------------
    def prepare(self, data: bytes | np.ndarray, keep: Keep | bool = "none", shape: Shape | None = None) -> Prepared:
        """Decode (bytes) and letterbox to the frame's shape (``shape`` forces one); a JPEG the
        device decoder takes is only probed (``Pending``). Thread-safe; OpenCV releases the GIL
        here. ``keep`` True is "evidence"."""
        keep = "evidence" if keep is True else "none" if keep is False else keep
        t0 = time.perf_counter()
        reduction = 1
        if isinstance(data, (bytes, bytearray, memoryview)):
            data, header = probe(data, self.max_pixels)
            width, height = header.upright
            target = shape or choose_shape(width, height, self.shapes)
            if self.decoder.takes(data, header):
                deferred = self.decoder.defer(data, header, target, keep, self.decode)
                deferred.decode_ms = (time.perf_counter() - t0) * 1e3  # the probe; the lane adds the decode
                return deferred
            if self.decode.reduce and keep != "full":
                min_width = self.decode.evidence_min_width if keep == "evidence" else 0
                reduction = reduction_for(header, letterbox_scale(width, height, target), min_width)
            img = decode_pixels(data, header, reduction)
        else:
            img = data
            height, width = img.shape[:2]
            target = shape or choose_shape(width, height, self.shapes)
        t1 = time.perf_counter()
        boxed, box = letterbox(img, target, original=(width, height))
        t2 = time.perf_counter()
        return Prepared(boxed, box, (t1 - t0) * 1e3, (t2 - t1) * 1e3, img if keep != "none" else None, reduction)

    def infer(self, images: Sequence[np.ndarray | Pending], floor: float | Sequence[float] = 0.0,
              count: bool = True) -> list[Candidates]:
        """One forward call on letterboxed (or pending) images of one shape; per image the anchors
        whose best score exceeds ``floor`` (the lowest ``conf`` the caller will ask for). Counts
        the call and releases the cache every N calls (``count`` False: warm-up, not counted)."""
        with self._serial:
            n = len(images)
            h, w = images[0].shape[:2]
            on_device = getattr(self.detector, "candidates", None)
            batch: Any = None
            if any(isinstance(image, Pending) for image in images):  # decoded and letterboxed on the device
                batch = self.decoder.letterbox_batch(images)
                if on_device is None or not self.decoder.feeds(self.detector):
                    batch = self.decoder.to_host(batch)
            decoded = cast(list[np.ndarray], images)  # no Pending left when batch is None
            if on_device is not None:  # uint8 in (a quarter of the bytes), normalised and filtered there
                if batch is None:
                    batch = self._buffer("u8", n, h, w, np.uint8)
                    np.stack(decoded, out=batch)
                out = on_device(batch, floor)
            else:
                frames = list(batch) if batch is not None else decoded
                out = compact(self.detector.infer(to_batch(frames, self._buffer("f32", n, h, w, np.float32))), floor)
        if count:
            self.after_inference(n)
        return out

    def _buffer(self, kind: str, n: int, h: int, w: int, dtype: type) -> np.ndarray:
        """This thread's reusable batch buffer (the caller's lane owns it until its call returns)."""
        buffers: dict[tuple[str, int, int], np.ndarray] = self._local.__dict__.setdefault("buffers", {})
        key = (kind, h, w)
        buf = buffers.get(key)
        if buf is None or buf.shape[0] < n:
            rows = max(n, 8) if self.lanes == 1 else n  # one buffer per lane: no spare rows each
            shape = (rows, h, w, 3) if kind == "u8" else (rows, 3, h, w)
            buf = buffers[key] = np.empty(shape, dtype)
        return buf[:n]

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

    def finish(self, raw: Candidates | np.ndarray, box: Letterbox, params: DetectParams) -> list[Detection]:
        """One image's candidates (or full head output) -> detections in original pixels."""
        dets = postprocess(raw, params.conf, params.iou, params.max_det, params.classes, multi_label=params.multi_label)
        return self.to_detections(dets, box)

    def to_detections(self, dets: Detections, box: Letterbox) -> list[Detection]:
        boxes = box.to_original(dets.boxes).tolist()
        names = self.detector.names
        return [Detection(c, names.get(c, str(c)), s, *b)
                for b, s, c in zip(boxes, dets.scores.tolist(), dets.class_ids.tolist(), strict=True)]

    # --- convenience ----------------------------------------------------------------------
    def detect(self, images: Sequence[bytes | np.ndarray], params: DetectParams | None = None,
               batch_size: int = 8, shape: Shape | None = None) -> list[list[Detection]]:
        """Library entry point: many images in, one detection list per image out. Each image
        goes to its aspect's shape (or ``shape``); a batch holds one shape."""
        params = params or DetectParams()
        results: list[list[Detection]] = []
        for start in range(0, len(images), batch_size):
            prepared = [self.prepare(img, shape=shape) for img in images[start:start + batch_size]]
            found: dict[int, list[Detection]] = {}
            for group in {p.shape for p in prepared}:
                members = [i for i, p in enumerate(prepared) if p.shape == group]
                raw = self.infer([prepared[i].letterboxed for i in members], params.conf)
                for i in members:
                    if (error := prepared[i].error) is not None:  # as the host path raises it in prepare
                        raise error
                found.update((i, self.finish(r, prepared[i].letterbox, params))
                             for i, r in zip(members, raw, strict=True))
            results.extend(found[i] for i in range(len(prepared)))
        return results
