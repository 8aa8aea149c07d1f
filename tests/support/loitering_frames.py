"""Frames of a person walking across a scene, for the loitering/crossing and router end-to-end tests."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import ultralytics

BUS = Path(ultralytics.__file__).parent / "assets" / "bus.jpg"


PERSON_BOX = (50, 395, 248, 903)  # the leftmost person of bus.jpg (yolov8n finds it at 0.9)


SIZE = 640


def frames() -> list[tuple[int, bytes]]:
    """(second, JPEG): walk down 6 frames, stand 5, walk up 6; 2 s apart; foot y in pixels."""
    x1, y1, x2, y2 = PERSON_BOX
    person = cv2.imread(str(BUS))[y1:y2, x1:x2]
    h = 256
    person = cv2.resize(person, (round(person.shape[1] * h / person.shape[0]), h), interpolation=cv2.INTER_AREA)
    feet = [280, 312, 344, 376, 408, 440] + [440] * 5 + [408, 376, 344, 312, 280, 264]
    out = []
    for i, foot in enumerate(feet):
        frame = np.full((SIZE, SIZE, 3), 128, np.uint8)
        left = SIZE // 2 - person.shape[1] // 2
        frame[foot - h:foot, left:left + person.shape[1]] = person
        ok, jpeg = cv2.imencode(".jpg", frame, [cv2.IMWRITE_JPEG_QUALITY, 90])
        assert ok
        out.append((2 * i, jpeg.tobytes()))
    return out
