"""Reduced JPEG decode, fixed shapes per aspect class, shape-grouped batches and compacted
candidates: the mechanics, in-process (a fake detector where the model is not the point)."""

from __future__ import annotations

import asyncio
import queue
import threading

import cv2
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.types import Detection, in_frame_pixels
from app.inference.batching import ShapeBatcher
from app.inference.pipeline import DecodePolicy, DetectParams, Pipeline
from app.inference.vision.candidates import Candidates, compact
from app.inference.vision.decode import decode_image, decode_pixels, probe, reduction_for
from app.inference.vision.postprocess import postprocess
from app.inference.vision.shapes import aspect_shape, choose_shape, parse_shapes
from tests.support.fakes import FakeDetector, make_engine

SHAPES = ((640, 640), (384, 640), (480, 640), (640, 384))


def jpeg(width: int, height: int, quality: int = 90, exif_orientation: int | None = None) -> bytes:
    """A frame with structure (gradients and a bright box), JPEG-encoded."""
    y, x = np.mgrid[0:height, 0:width]
    img = np.stack([(x * 255 // max(1, width - 1)), (y * 255 // max(1, height - 1)), ((x + y) % 256)], -1)
    img = img.astype(np.uint8)
    cv2.rectangle(img, (width // 4, height // 3), (width // 2, height * 2 // 3), (255, 255, 255), -1)
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, quality])
    assert ok
    data = buf.tobytes()
    if exif_orientation is not None:
        from PIL import Image
        import io

        pil = Image.open(io.BytesIO(data))
        exif = pil.getexif()
        exif[0x0112] = exif_orientation
        out = io.BytesIO()
        pil.save(out, "JPEG", quality=quality, exif=exif.tobytes())
        data = out.getvalue()
    return data


class BoxDetector(FakeDetector):
    """One box at a fixed place of the model input, for every shape it is asked to run."""

    names = {0: "person", 1: "car"}

    def __init__(self, shapes=((640, 640),)) -> None:
        super().__init__()
        self._shapes, self.imgsz, self.batch_shapes = tuple(shapes), shapes[0][0], []

    @property
    def shapes(self):
        return self._shapes

    def infer(self, batch: np.ndarray) -> np.ndarray:
        self.batch_shapes.append(tuple(batch.shape))
        out = np.zeros((len(batch), 6, 21), np.float32)
        h, w = batch.shape[2:]
        out[:, :4, 3] = [w / 2, h / 2, w / 4, h / 4]  # the middle of the input
        out[:, 4, 3] = 0.9
        return out


# --- reduced decode -----------------------------------------------------------------------------

@pytest.mark.parametrize(("size", "shape", "keep_width", "expected"), [
    ((1920, 1080), (640, 640), 0, 2), ((1920, 1080), (384, 640), 0, 2), ((3840, 2160), (384, 640), 0, 4),
    ((3840, 2160), (384, 640), 960, 4), ((1280, 720), (384, 640), 0, 2), ((1280, 720), (384, 640), 960, 1),
    ((7680, 4320), (384, 640), 0, 8), ((1000, 700), (640, 640), 0, 1), ((640, 480), (480, 640), 0, 1)])
def test_reduction_follows_the_letterbox_scale(size, shape, keep_width, expected):
    header = probe(jpeg(64, 36), 10**9)[1]
    header = type(header)("jpeg", size[0], size[1], 1)
    from app.inference.vision.shapes import letterbox_scale

    assert reduction_for(header, letterbox_scale(*size, shape), keep_width) == expected


def test_only_jpeg_is_reduced():
    ok, png = cv2.imencode(".png", np.zeros((1080, 1920, 3), np.uint8))
    header = probe(png.tobytes(), 10**9)[1]
    assert reduction_for(header, 1 / 3) == 1


def test_reduced_decode_is_the_frame_at_a_fraction():
    data = jpeg(1920, 1080)
    data, header = probe(data, 10**9)
    full, half, quarter = (decode_pixels(data, header, r) for r in (1, 2, 4))
    assert full.shape == (1080, 1920, 3) and half.shape == (540, 960, 3) and quarter.shape == (270, 480, 3)
    shrunk = cv2.resize(full, (960, 540), interpolation=cv2.INTER_AREA)
    assert np.abs(shrunk.astype(int) - half.astype(int)).mean() < 3  # the same picture, RGB like the full decode


def test_reduced_decode_applies_exif_orientation_like_the_full_one():
    data = jpeg(1920, 1080, exif_orientation=6)  # stored landscape, shown portrait
    data, header = probe(data, 10**9)
    assert header.upright == (1080, 1920)
    full, half = decode_pixels(data, header, 1), decode_pixels(data, header, 2)
    assert full.shape == (1920, 1080, 3) and half.shape == (960, 540, 3)
    assert np.abs(cv2.resize(full, (540, 960), interpolation=cv2.INTER_AREA).astype(int) - half.astype(int)).mean() < 3


def test_a_full_decode_is_shrunk_to_the_picture_a_reduced_decode_gives(bus_jpg):
    """Beyond 2x the letterbox area-averages by the largest power of two first (the size a DCT-scaled
    decode has), then bilinear: the full and the reduced decode of a real camera-sized frame hand the
    model nearly the same input, nearer than one area shrink of the whole way (parity 0.975 -> 0.986)."""
    from app.inference.vision.preprocess import letterbox

    photo = decode_image(bus_jpg, 10**8)
    frame = cv2.resize(photo, (1440, 1920), interpolation=cv2.INTER_CUBIC)  # portrait, 3x the 640 input
    data = cv2.imencode(".jpg", cv2.cvtColor(frame, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()
    data, header = probe(data, 10**9)
    full, half = decode_pixels(data, header, 1), decode_pixels(data, header, 2)
    (full_in, a), (half_in, b) = letterbox(full, 640), letterbox(half, 640, original=(1440, 1920))
    assert a == b and full_in.shape == half_in.shape == (640, 640, 3)
    one_step = full_in.copy()
    box = cv2.resize(full, (480, 640), interpolation=cv2.INTER_AREA)
    one_step[:, a.pad_x:a.pad_x + 480] = box

    def gap(x: np.ndarray) -> float:
        return float(np.abs(x.astype(int) - half_in.astype(int)).mean())

    assert gap(full_in) < 1.0 and gap(full_in) < 0.8 * gap(one_step)


def test_small_shrinks_stay_bilinear_and_big_ones_go_by_powers_of_two():
    from app.inference.vision.preprocess import resize

    img = np.random.default_rng(1).integers(0, 256, (1080, 1920, 3), np.uint8)
    assert np.array_equal(resize(img, 1280, 720), cv2.resize(img, (1280, 720), interpolation=cv2.INTER_LINEAR))
    quarter = cv2.resize(img, (480, 270), interpolation=cv2.INTER_AREA)
    assert np.array_equal(resize(img, 480, 270), quarter)  # exactly 4x: area only
    assert np.array_equal(resize(img, 400, 225), cv2.resize(quarter, (400, 225), interpolation=cv2.INTER_LINEAR))


@pytest.mark.parametrize("orientation", [None, 6, 3])
def test_boxes_stay_in_original_pixels_with_a_reduced_decode(orientation):
    """A 1920x1080 frame decoded at 1/2 gives exactly the boxes of the full decode."""
    data = jpeg(1920, 1080, exif_orientation=orientation)
    reduced = Pipeline(BoxDetector(SHAPES), 0)
    full = Pipeline(BoxDetector(SHAPES), 0, decode=DecodePolicy(reduce=False))
    a, b = reduced.prepare(data), full.prepare(data)
    assert (a.reduction, b.reduction) == (2, 1)
    assert a.letterbox == b.letterbox and a.shape == b.shape
    da, db = reduced.detect([data])[0], full.detect([data])[0]
    assert len(da) == 1 and da == db
    width, height = (1080, 1920) if orientation == 6 else (1920, 1080)
    assert (a.letterbox.width, a.letterbox.height) == (width, height)
    (h, w), box = a.shape, a.letterbox  # the middle quarter of the model input, in the frame's pixels
    expected = ((w * 3 / 8 - box.pad_x) / box.scale, (h * 3 / 8 - box.pad_y) / box.scale,
                (w * 5 / 8 - box.pad_x) / box.scale, (h * 5 / 8 - box.pad_y) / box.scale)
    d = da[0]
    assert (d.x1, d.y1, d.x2, d.y2) == pytest.approx(expected, abs=0.01)


def test_kept_frames_are_evidence_sized_or_full():
    data = jpeg(1280, 720)
    pipe = Pipeline(BoxDetector(SHAPES), 0)
    assert pipe.prepare(data).image is None and pipe.prepare(data).reduction == 2
    evidence = pipe.prepare(data, keep="evidence")  # 640 wide would be under EVIDENCE_MIN_WIDTH 960
    assert evidence.reduction == 1 and evidence.image.shape == (720, 1280, 3)
    big = jpeg(3840, 2160)
    kept = pipe.prepare(big, keep="evidence")
    assert kept.reduction == 4 and kept.image.shape == (540, 960, 3)
    assert pipe.prepare(big, keep="full").image.shape == (2160, 3840, 3)


def test_detections_are_drawn_in_the_kept_frames_pixels():
    dets = [Detection(0, "person", 0.9, 100.0, 200.0, 300.0, 400.0)]
    assert in_frame_pixels(dets, (1920, 1080), (1080, 1920, 3)) == dets
    (half,) = in_frame_pixels(dets, (1920, 1080), (540, 960, 3))
    assert (half.x1, half.y1, half.x2, half.y2) == (50.0, 100.0, 150.0, 200.0)


# --- shapes -------------------------------------------------------------------------------------

def test_aspect_classes_and_routing():
    assert aspect_shape(1920, 1080) == (384, 640) and aspect_shape(1280, 960) == (480, 640)
    assert aspect_shape(1080, 1920) == (640, 384) and aspect_shape(800, 800) == (640, 640)
    assert choose_shape(1920, 1080, SHAPES) == (384, 640)  # the same pixels as 640x640, 40% less canvas
    assert choose_shape(1280, 960, SHAPES) == (480, 640)
    assert choose_shape(1080, 1920, SHAPES) == (640, 384)
    assert choose_shape(810, 1080, SHAPES) == (640, 640)  # 3:4 portrait keeps most on the square
    assert choose_shape(1920, 1080, ((640, 640),)) == (640, 640)
    assert parse_shapes("384x640, 640", 640) == ((640, 640), (384, 640))


def test_each_frame_goes_to_its_aspects_shape_and_batches_never_mix():
    detector = BoxDetector(SHAPES)
    pipe = Pipeline(detector, 0)
    frames = [jpeg(*size) for size in ((1920, 1080), (1280, 960), (1920, 1080), (1080, 1920), (1280, 720))]
    results = pipe.detect(frames, DetectParams(), batch_size=8)
    assert [len(r) for r in results] == [1] * 5
    assert sorted(s[2:] for s in detector.batch_shapes) == [(384, 640), (480, 640), (640, 384)]
    assert {s[0] for s in detector.batch_shapes if s[2:] == (384, 640)} == {3}


class Item:
    def __init__(self, shape, n):
        self.shape, self.n = shape, n


def test_shape_batcher_groups_and_keeps_the_others_for_next():
    q: queue.Queue = queue.Queue()
    for n, shape in enumerate([(384, 640), (480, 640), (384, 640), (480, 640), (384, 640)]):
        q.put(Item(shape, n))
    batcher = ShapeBatcher(q, max_batch=8, max_delay_s=0.0)
    first = batcher.next_batch()
    assert [i.n for i in first] == [0, 2, 4] and batcher.pulled == 5 and len(batcher.held) == 2
    second = batcher.next_batch()
    assert [i.n for i in second] == [1, 3] and batcher.pulled == 0
    assert batcher.next_batch(timeout=0.01) == []


def test_shape_batcher_respects_the_batch_size_and_age():
    q: queue.Queue = queue.Queue()
    for n in range(5):
        q.put(Item((640, 640) if n == 0 else (384, 640), n))
    batcher = ShapeBatcher(q, max_batch=2, max_delay_s=0.0)
    assert [i.n for i in batcher.next_batch()] == [0]
    assert [i.n for i in batcher.next_batch()] == [1, 2]  # held items first, oldest first
    assert [i.n for i in batcher.next_batch()] == [3, 4]


def test_engine_batches_group_by_shape():
    detector = BoxDetector(SHAPES)
    engine = make_engine(detector, max_batch_size=8, max_queue_delay_ms=100)
    frames = [jpeg(1920, 1080), jpeg(1280, 960)] * 3

    async def run():
        return await asyncio.gather(*(engine.detect(f, DetectParams()) for f in frames))

    try:
        results = asyncio.run(run())
    finally:
        engine.stop()
    assert all(len(r.detections) == 1 for r in results)
    assert all(len({s[2:] for s in [shape]}) == 1 for shape in detector.batch_shapes)
    assert sum(s[0] for s in detector.batch_shapes) == 6
    assert {s[2:] for s in detector.batch_shapes} == {(384, 640), (480, 640)}


# --- compacted candidates -------------------------------------------------------------------------

def realistic_head(rng: np.random.Generator, n: int = 3, nc: int = 6, anchors: int = 300) -> np.ndarray:
    head = np.zeros((n, 4 + nc, anchors), np.float32)
    head[:, 0:2] = rng.uniform(0, 320, (n, 2, anchors))
    head[:, 2:4] = rng.uniform(4, 120, (n, 2, anchors))
    head[:, 4:] = rng.beta(0.3, 6, (n, nc, anchors))  # mostly near 0, a few confident
    head[:, 4:, rng.integers(0, anchors, 5)] += 0.5
    return np.clip(head, 0, 1e4)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 10**6), conf=st.sampled_from([0.001, 0.1, 0.25, 0.5]),
       multi=st.booleans(), lower=st.floats(0, 1))
def test_compacted_candidates_give_what_the_full_head_gives(seed, conf, multi, lower):
    """Any floor at or below conf: the same detections, the same order (one NMS for all)."""
    head = realistic_head(np.random.default_rng(seed))
    floor = conf * lower
    for image, cand in zip(head, compact(head, floor)):
        assert np.all(np.diff(cand.anchors) > 0)
        full = postprocess(image, conf, 0.6, 300, multi_label=multi)
        ours = postprocess(cand, conf, 0.6, 300, multi_label=multi)
        np.testing.assert_array_equal(ours.boxes, full.boxes)
        np.testing.assert_array_equal(ours.scores, full.scores)
        np.testing.assert_array_equal(ours.class_ids, full.class_ids)


def test_compaction_keeps_only_anchors_over_each_images_floor():
    head = realistic_head(np.random.default_rng(1))
    cands = compact(head, [0.0, 0.3, 0.9])
    best = head[:, 4:, :].max(axis=1)
    for i, cand in enumerate(cands):
        np.testing.assert_array_equal(cand.anchors, np.flatnonzero(best[i] > [0.0, 0.3, 0.9][i]))
        np.testing.assert_array_equal(cand.rows, head[i][:, cand.anchors].T)
    assert len(cands[0]) > len(cands[1]) > len(cands[2])
    assert isinstance(Candidates.of_head(head[0]), Candidates) and len(Candidates.of_head(head[0])) == 300


def test_engine_passes_each_requests_conf_as_the_floor():
    seen: list = []
    detector = BoxDetector()
    pipeline = Pipeline(detector, 0)
    original = pipeline.infer

    def spy(images, floor=0.0, count=True):
        seen.append(list(floor) if not np.isscalar(floor) else floor)
        return original(images, floor, count)

    pipeline.infer = spy
    from app.core.metrics import Metrics
    from app.inference.engine import EngineLimits, InferenceEngine

    engine = InferenceEngine(pipeline, EngineLimits(max_batch_size=4, max_queue_delay_ms=100), Metrics())
    engine.start()
    engine.mark_ready()
    frame = jpeg(320, 320)

    async def run():
        return await asyncio.gather(engine.detect(frame, DetectParams(conf=0.5)), engine.detect(frame, DetectParams(conf=0.95)))

    try:
        low, high = asyncio.run(run())
    finally:
        engine.stop()
    assert sorted(x for batch in seen for x in batch) == [0.5, 0.95]
    assert len(low.detections) == 1 and high.detections == []  # 0.9 passes 0.5, not 0.95


# --- the real model: device-side filtering equals the host's, and NMS equals torchvision's -----------

@pytest.fixture(scope="module")
def torch_detector(weights):
    from app.inference.backends.torch_backend import TorchDetector

    return TorchDetector(weights, imgsz=320, threads=2, shapes=((320, 320), (192, 320)))


@pytest.mark.parametrize("shape", [(320, 320), (192, 320)])
def test_device_candidates_equal_the_host_compaction(torch_detector, bus_jpg, zidane_jpg, shape):
    """uint8 upload + on-device normalisation and score filter == the float batch + numpy path."""
    from app.inference.vision.preprocess import letterbox, to_batch

    boxed = [letterbox(decode_image(b, 10**8), shape)[0] for b in (bus_jpg, zidane_jpg)]
    on_device = torch_detector.candidates(np.stack(boxed), [0.25, 0.05])
    on_host = compact(torch_detector.infer(to_batch(boxed)), [0.25, 0.05])
    for a, b in zip(on_device, on_host):
        assert len(a) > 0
        np.testing.assert_array_equal(a.anchors, b.anchors)
        np.testing.assert_array_equal(a.rows, b.rows)


def test_nms_on_compacted_candidates_equals_torchvision(torch_detector, bus_jpg, zidane_jpg):
    """The one NMS, fed the compacted set of a real head, keeps what torchvision keeps."""
    import torch
    import torchvision

    from app.inference.vision.postprocess import xywh_to_xyxy
    from app.inference.vision.preprocess import letterbox

    boxed = [letterbox(decode_image(b, 10**8), 320)[0] for b in (bus_jpg, zidane_jpg)]
    for cand in torch_detector.candidates(np.stack(boxed), 0.05):
        ours = postprocess(cand, 0.05, 0.5, 1000)
        scores, cls = cand.rows[:, 4:].max(axis=1), cand.rows[:, 4:].argmax(axis=1)
        keep = scores > 0.05
        boxes = xywh_to_xyxy(cand.rows[keep, :4])
        ref = torchvision.ops.batched_nms(torch.from_numpy(boxes), torch.from_numpy(scores[keep]),
                                          torch.from_numpy(cls[keep]), 0.5).numpy()
        assert len(ours) == len(ref) > 3
        np.testing.assert_allclose(ours.boxes, boxes[ref], atol=1e-3)
        np.testing.assert_array_equal(ours.class_ids, cls[keep][ref])
