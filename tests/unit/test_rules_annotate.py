"""Annotated frames: a decodable JPEG of the frame's size with boxes, zones and alerts drawn."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from app.core.types import Detection
from app.inference.vision.annotate import ZoneOverlay, annotate_jpeg


def decode(data: bytes) -> np.ndarray:
    img = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)
    assert img is not None
    return img


@pytest.mark.parametrize("w, h", [(640, 480), (333, 517), (1920, 1080), (17, 9)])
def test_jpeg_of_the_frames_size(w, h):
    frame = np.zeros((h, w, 3), np.uint8)
    dets = [Detection(0, "person", 0.87, w * 0.2, h * 0.2, w * 0.5, h * 0.9)]
    zones = [ZoneOverlay("lawn", ((0.1, 0.1), (0.9, 0.1), (0.5, 0.9)))]
    data = annotate_jpeg(frame, dets, zones, {"lawn": ["intrusion"]})
    assert data[:3] == b"\xff\xd8\xff"
    assert decode(data).shape == (h, w, 3)


def test_things_are_drawn_and_alerts_are_red():
    w, h = 400, 300
    frame = np.zeros((h, w, 3), np.uint8)
    plain = decode(annotate_jpeg(frame, []))
    assert plain.max() < 10  # nothing to draw: still the (black) frame

    zone = ZoneOverlay("gate", ((0.25, 0.25), (0.75, 0.25), (0.75, 0.75), (0.25, 0.75)))
    idle = decode(annotate_jpeg(frame, [], [zone]))
    alert = decode(annotate_jpeg(frame, [], [zone], {"gate": ["crowd"]}))
    inside = (slice(100, 200), slice(120, 280))
    # the alert zone's fill is red (BGR: high R channel), the idle one is not
    assert alert[inside][..., 2].mean() > 30 and alert[inside][..., 2].mean() > idle[inside][..., 2].mean() + 20
    boxed = decode(annotate_jpeg(frame, [Detection(2, "car", 0.5, 50, 50, 150, 120)], names={2: "auto"}))
    assert boxed[50:120, 48:53].max() > 100  # the box's left edge


def test_only_zones_with_alerts_are_marked():
    frame = np.full((200, 300, 3), 255, np.uint8)
    zone = ZoneOverlay("gate", ((0.25, 0.25), (0.75, 0.25), (0.75, 0.75), (0.25, 0.75)))
    inside = (slice(90, 110), slice(140, 160))
    ended = decode(annotate_jpeg(frame, [], [zone], {}))
    started = decode(annotate_jpeg(frame, [], [zone], {"gate": ["crowd"]}))
    # BGR: an open event's zone is tinted red (blue channel drops), an ended one keeps the idle colour
    assert started[inside][..., 0].mean() < ended[inside][..., 0].mean() - 20


def test_counting_lines_are_drawn_with_their_in_arrow():
    frame = np.zeros((400, 400, 3), np.uint8)
    zone = ZoneOverlay("hall", ((0.0, 0.0), (1.0, 0.0), (1.0, 1.0), (0.0, 1.0)),
                    (((0.1, 0.5), (0.9, 0.5)),))
    img = decode(annotate_jpeg(frame, [], [zone]))
    yellow = lambda px: px[1] > 150 and px[2] > 150 and px[0] < 120  # noqa: E731 (BGR)
    assert yellow(img[200, 100]) and yellow(img[200, 300])      # on the line
    assert not yellow(img[100, 200]) and not yellow(img[300, 100])  # off it
    assert yellow(img[210, 200])                                # the arrow points down: "in" for this line


def test_exclusion_masks_are_shaded_and_hatched():
    """A guard sees where a rule ignores detections: the mask is darker than the rest of the
    frame and carries grey stripes; outside it the frame is untouched."""
    frame = np.full((400, 400, 3), 200, np.uint8)
    mask = ((0.5, 0.5), (1.0, 0.5), (1.0, 1.0), (0.5, 1.0))
    zone = ZoneOverlay("yard", ((0.0, 0.0), (0.4, 0.0), (0.4, 0.4), (0.0, 0.4)),
                    excludes=(mask,))
    img = decode(annotate_jpeg(frame, [], [zone], quality=100))
    masked = img[230:380, 230:380].astype(int)
    outside = img[230:380, 20:180].astype(int)
    assert abs(outside.mean() - 200) < 3                       # untouched
    assert masked.mean() < 160                                  # darkened
    grey = (np.abs(masked - 128) < 8).all(axis=2).mean()
    assert 0.05 < grey < 0.6                                    # striped, not filled
    plain = decode(annotate_jpeg(frame, [], [ZoneOverlay("yard", zone.polygon)],
                                 [], quality=100))
    assert abs(plain[230:380, 230:380].astype(int).mean() - 200) < 3  # no mask, nothing drawn there

