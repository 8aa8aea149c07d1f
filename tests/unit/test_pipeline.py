"""Pipeline mechanics with a fake Detector: periodic cache release, counters, box mapping."""

from __future__ import annotations

import threading

import cv2
import numpy as np
import pytest

from app.inference.backends.base import Detector
from app.core.errors import InvalidImage
from app.inference.pipeline import DetectParams, Pipeline
from tests.support.fakes import FakeDetector

pytestmark = pytest.mark.timeout(60)


def fake_detector(imgsz: int = 64, box=(32.0, 32.0, 16.0, 8.0)) -> FakeDetector:
    """Every image yields one box at a fixed spot of the model input (xywh ``box``, class 1,
    score 0.9); the detector checks each batch's dtype and size and counts what it is asked."""
    return FakeDetector(imgsz=imgsz, names={0: "person", 1: "bicycle", 2: "car"}, boxes=((box, 1, 0.9),),
                        anchors=5, provider="FakeExecutionProvider", check_input=True)


def tensor(size: int = 64) -> np.ndarray:
    """A letterboxed frame as the pipeline queues it (HWC uint8)."""
    return np.zeros((size, size, 3), np.uint8)


def test_fake_fulfils_the_protocol():
    assert isinstance(fake_detector(), Detector)


@pytest.mark.parametrize("every", [1, 3, 7])
def test_release_cache_exactly_every_n_inferences(every):
    det = fake_detector()
    pipe = Pipeline(det, cache_clear_every=every)
    for i in range(1, 30):
        pipe.infer([tensor()] * (1 + i % 3))
        assert det.releases == i // every, f"after {i} inferences"
        assert pipe.counters.cache_clears == det.releases
        assert pipe.counters.inferences == i
    assert pipe.counters.images == sum(1 + i % 3 for i in range(1, 30))


def test_zero_never_releases():
    det = fake_detector()
    pipe = Pipeline(det, cache_clear_every=0)
    before = pipe.counters.last_cache_clear
    for _ in range(50):
        pipe.infer([tensor()])
    assert det.releases == 0 and pipe.counters.cache_clears == 0
    assert pipe.counters.inferences == 50 and pipe.counters.last_cache_clear == before


def test_manual_release_counts_and_stamps():
    det = fake_detector()
    pipe = Pipeline(det, cache_clear_every=0)
    before = pipe.counters.last_cache_clear
    pipe.release_cache()
    assert det.releases == 1 and pipe.counters.cache_clears == 1
    assert pipe.counters.last_cache_clear >= before


def test_detect_counts_batches_not_images():
    det = fake_detector()
    pipe = Pipeline(det, cache_clear_every=2)
    images = [np.zeros((48, 64, 3), np.uint8)] * 5
    out = pipe.detect(images, batch_size=2)
    assert len(out) == 5
    assert [b[0] for b in det.batches] == [2, 2, 1]
    assert pipe.counters.inferences == 3 and pipe.counters.images == 5
    assert det.releases == 1 == pipe.counters.cache_clears


def test_concurrent_inferences_release_exactly():
    det = fake_detector()
    pipe = Pipeline(det, cache_clear_every=5)

    def work():
        for _ in range(50):
            pipe.infer([tensor()])

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert pipe.counters.inferences == 200
    assert det.releases == 40 == pipe.counters.cache_clears


def test_boxes_mapped_back_to_original_pixels():
    # 128x64 (w x h) image into a 64 input: scale 0.5, 16 rows of padding on top
    det = fake_detector(imgsz=64, box=(32.0, 32.0, 16.0, 8.0))  # xyxy 24,28,40,36 in the input
    pipe = Pipeline(det)
    dets = pipe.detect([np.zeros((64, 128, 3), np.uint8)])[0]
    assert len(dets) == 1
    d = dets[0]
    assert (d.class_id, d.class_name) == (1, "bicycle")
    assert d.confidence == pytest.approx(0.9)
    assert (d.x1, d.y1, d.x2, d.y2) == pytest.approx((48, 24, 80, 40))


def test_params_reach_postprocess():
    pipe = Pipeline(fake_detector())
    img = np.zeros((64, 64, 3), np.uint8)
    assert pipe.detect([img], DetectParams(conf=0.95))[0] == []
    assert pipe.detect([img], DetectParams(classes=frozenset({0})))[0] == []
    assert len(pipe.detect([img], DetectParams(classes=frozenset({1})))[0]) == 1


def test_bytes_are_decoded_and_limited():
    ok, png = cv2.imencode(".png", np.zeros((40, 50, 3), np.uint8))
    pipe = Pipeline(fake_detector(), max_pixels=2000)
    prepared = pipe.prepare(png.tobytes())
    assert prepared.letterboxed.shape == (64, 64, 3) and prepared.letterboxed.dtype == np.uint8
    assert (prepared.letterbox.width, prepared.letterbox.height) == (50, 40)
    # both stages were timed (the fields default to 0.0 when nobody measures), on a sane scale
    assert 0 < prepared.decode_ms < 10_000 and 0 < prepared.preprocess_ms < 10_000
    with pytest.raises(InvalidImage):
        pipe.prepare(b"")
    from app.core.errors import ImageTooLarge

    with pytest.raises(ImageTooLarge):
        Pipeline(fake_detector(), max_pixels=1999).prepare(png.tobytes())
