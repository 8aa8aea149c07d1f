"""Letterbox: one fixed square shape, pad value 114, exact inverse mapping of boxes."""

from __future__ import annotations

import numpy as np
import pytest

from app.inference.vision.preprocess import PAD_VALUE, Letterbox, letterbox, preprocess, stack, to_tensor

pytestmark = pytest.mark.timeout(30)


@pytest.mark.parametrize("h,w", [(1080, 810), (480, 640), (1, 1), (320, 320), (17, 1000), (1000, 17), (700, 300)])
@pytest.mark.parametrize("size", [320, 640])
def test_output_shape_is_fixed_square(h, w, size):
    img = np.full((h, w, 3), 7, np.uint8)
    boxed, box = letterbox(img, size)
    assert boxed.shape == (size, size, 3) and boxed.dtype == np.uint8
    assert (box.width, box.height) == (w, h)
    tensor, _ = preprocess(img, size)
    assert tensor.shape == (3, size, size) and tensor.dtype == np.float32


def test_padding_value_is_114_and_centred():
    img = np.full((100, 200, 3), 0, np.uint8)  # wide: padded top and bottom
    boxed, box = letterbox(img, 320)
    assert box.scale == pytest.approx(1.6)
    assert box.pad_x == 0 and box.pad_y == 80
    assert (boxed[:80] == PAD_VALUE).all() and (boxed[-80:] == PAD_VALUE).all()
    assert (boxed[80:240] == 0).all()
    tall, tbox = letterbox(np.zeros((200, 100, 3), np.uint8), 320)
    assert tbox.pad_x == 80 and tbox.pad_y == 0
    assert (tall[:, :80] == PAD_VALUE).all() and (tall[:, -80:] == PAD_VALUE).all()
    assert PAD_VALUE == 114


def test_odd_padding_split_like_ultralytics():
    """Odd total padding: the extra pixel goes to bottom/right (round(d -/+ 0.1))."""
    boxed, box = letterbox(np.zeros((101, 320, 3), np.uint8), 320)
    # 320 - 101 = 219 rows of padding: 109 on top, 110 below
    assert box.pad_y == 109
    assert (boxed[:109] == PAD_VALUE).all() and (boxed[109:210] == 0).all() and (boxed[210:] == PAD_VALUE).all()


def test_matches_ultralytics_letterbox(bus_jpg):
    from ultralytics.data.augment import LetterBox

    from app.inference.vision.decode import decode_image

    rgb = decode_image(bus_jpg, 40_000_000)
    ours, _ = letterbox(rgb, 640)
    theirs = LetterBox((640, 640), auto=False, stride=32)(image=rgb)
    np.testing.assert_array_equal(ours, theirs)


def test_to_original_inverts_and_clips():
    img = np.zeros((480, 640, 3), np.uint8)
    _, box = letterbox(img, 320)  # scale 0.5, pad_y 40
    assert (box.scale, box.pad_x, box.pad_y) == (0.5, 0, 40)
    model_boxes = np.array([
        [10, 50, 110, 150],     # inside
        [-20, 0, 400, 330],      # beyond every edge and into the padding
    ], np.float32)
    out = box.to_original(model_boxes)
    np.testing.assert_allclose(out[0], [20, 20, 220, 220])
    np.testing.assert_allclose(out[1], [0, 0, 640, 480])
    assert out.dtype == np.float32
    assert model_boxes[0, 0] == 10  # input left untouched


def test_to_original_round_trip_random():
    rng = np.random.default_rng(1)
    for _ in range(20):
        h, w = rng.integers(1, 2000, size=2)
        _, box = letterbox(np.zeros((h, w, 3), np.uint8), 640)
        x1, x2 = np.sort(rng.uniform(0, w, 2))
        y1, y2 = np.sort(rng.uniform(0, h, 2))
        orig = np.array([[x1, y1, x2, y2]], np.float32)
        model = orig * box.scale + np.array([box.pad_x, box.pad_y] * 2, np.float32)
        np.testing.assert_allclose(box.to_original(model), orig, atol=1e-2)


def test_to_original_empty():
    box = Letterbox(scale=1.0, pad_x=0, pad_y=0, width=10, height=10)
    assert box.to_original(np.zeros((0, 4), np.float32)).shape == (0, 4)


def test_tensor_layout_and_range():
    img = np.zeros((2, 3, 3), np.uint8)
    img[..., 0], img[..., 1], img[..., 2] = 0, 51, 255
    t = to_tensor(img)
    assert t.shape == (3, 2, 3) and t.flags.c_contiguous
    np.testing.assert_allclose(t[:, 0, 0], [0.0, 0.2, 1.0], atol=1e-6)
    batch = stack([t, t])
    assert batch.shape == (2, 3, 2, 3) and batch.flags.c_contiguous


def test_to_batch_matches_per_image_conversion_and_reuses_the_buffer():
    from app.inference.vision.preprocess import to_batch

    rng = np.random.default_rng(3)
    images = [rng.integers(0, 256, (32, 48, 3), dtype=np.uint8) for _ in range(3)]
    buf = np.full((4, 3, 32, 48), -1, np.float32)
    out = to_batch(images, buf[:3])
    assert out.base is buf or out is buf[:3] or np.shares_memory(out, buf)
    np.testing.assert_array_equal(out, stack([to_tensor(i) for i in images]))
    assert (buf[3] == -1).all()


def test_rectangular_letterbox_fixed_shape_and_inverse():
    img = np.full((1080, 1920, 3), 200, np.uint8)
    boxed, box = letterbox(img, (384, 640))
    assert boxed.shape == (384, 640, 3)
    assert box.scale == pytest.approx(1 / 3) and box.pad_x == 0 and box.pad_y == 12
    assert (boxed[:12] == PAD_VALUE).all() and (boxed[-12:] == PAD_VALUE).all()
    back = box.to_original(np.array([[0, 12, 640, 372]], np.float32))
    np.testing.assert_allclose(back, [[0, 0, 1920, 1080]], atol=0.01)


@pytest.mark.parametrize("h,w", [(5000, 2), (2, 5000), (1, 20000), (20000, 1), (3, 100000)])
@pytest.mark.parametrize("size", [320, (256, 320)])
def test_extreme_aspect_ratios_letterbox_to_the_fixed_shape(h, w, size):
    """A strip thinner than half a model pixel once scaled used to reach cv2.resize as size 0."""
    img = np.full((h, w, 3), 9, np.uint8)
    boxed, box = letterbox(img, size)
    out_h, out_w = (size, size) if isinstance(size, int) else size
    assert boxed.shape == (out_h, out_w, 3)
    assert (box.width, box.height) == (w, h)
    mapped = box.to_original(np.array([[0, 0, out_w, out_h]], np.float32))
    assert (mapped[0, [0, 2]] >= 0).all() and (mapped[0, [0, 2]] <= w).all()
    assert (mapped[0, [1, 3]] >= 0).all() and (mapped[0, [1, 3]] <= h).all()
