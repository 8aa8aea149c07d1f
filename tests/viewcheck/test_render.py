"""The before/after pair: one side-by-side JPEG, reference left, current right, labelled."""

from __future__ import annotations

import datetime as dt

import cv2
import numpy as np
import pytest

from app.rules.logic.view import ViewCheckOptions, ViewMonitor, render_transition, side_by_side
from tests.support.viewcheck import Camera, T0, feed, learned, tape


def decode(jpeg: bytes) -> np.ndarray:
    img = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    assert img is not None
    return img


def test_the_pair_puts_the_reference_left_and_the_current_view_right():
    blue = np.zeros((240, 320, 3), np.uint8)
    blue[..., 0] = 255
    red = np.zeros((480, 640, 3), np.uint8)
    red[..., 2] = 255
    img = decode(side_by_side(blue, red, "BEFORE", "NOW", height=200))
    assert img.shape[0] == 200 + 28
    left, right = img[100, 40], img[100, -40]
    assert left[0] > 200 and left[2] < 60  # blue on the left
    assert right[2] > 200 and right[0] < 60  # red on the right
    assert img.shape[1] == round(320 * 200 / 240) * 2 + 6
    assert img[5:20, 2:200].std() > 10  # the label bar carries text


def test_rgb_frames_are_shown_in_their_true_colours():
    red_rgb = np.zeros((100, 100, 3), np.uint8)
    red_rgb[..., 0] = 255
    img = decode(side_by_side(red_rgb, red_rgb, "a", "b", rgb=True, height=100))
    assert img[60, 50, 2] > 200 and img[60, 50, 0] < 60


def test_grey_and_missing_references_render():
    grey = np.full((90, 160), 128, np.uint8)
    img = decode(side_by_side(None, grey, "no reference", "now", height=90))
    assert img.shape[0] == 90 + 28


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError):
        side_by_side(None, np.zeros((10, 10, 3), np.uint8), "a", "b", height=5)


def test_a_started_transition_renders_with_its_labels(dataset):
    camera = Camera.on(dataset, 11, size=(640, 480))
    monitor = ViewMonitor(ViewCheckOptions(learn_s=10))
    t = learned(monitor, camera)
    (tr,) = feed(monitor, [(t + i, camera.frame(tape), []) for i in range(0, 12, 2)])
    assert tr.reference_image.shape == (360, 480, 3) and tr.current_image.shape == (360, 480, 3)
    jpeg = render_transition(tr, "gate-1", monitor.state().learned["day"])
    img = decode(jpeg)
    assert img.shape == (360 + 28, 480 * 2 + 6, 3)
    assert 10_000 < len(jpeg) < 200_000
    # the reference half is the scene (structured), the current half is the tape (flat)
    grey = cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)
    assert grey[40:, :480].std() > 3 * grey[40:, 486:].std()
    ended = [tr2 for tr2 in monitor.relearn(T0 + dt.timedelta(seconds=200))]
    with pytest.raises(ValueError, match="started"):
        render_transition(ended[0], "gate-1")
