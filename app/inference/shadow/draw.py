"""A kept frame as JPEG, and the same frame with both box sets drawn on it.

How to read it (docs/shadow.md): green = a reference box the primary found too (the primary's
box thin white inside it), red = a reference box the primary MISSED, magenta = a primary box
the reference does not have (EXTRA). Labels are class and confidence, ``R`` for the
reference, ``P`` for the primary. The banner gives the frame's recall, precision, agreement.
"""

from __future__ import annotations

from collections.abc import Mapping

import cv2
import numpy as np

from app.inference.precision.agreement import Boxes, match

MATCHED, MISSED, EXTRA, PRIMARY = (60, 180, 60), (0, 0, 230), (200, 0, 200), (255, 255, 255)  # BGR


def encode_frame(rgb: np.ndarray, max_width: int, quality: int = 80) -> bytes:
    """RGB frame -> JPEG at most ``max_width`` wide (the worst-frames store keeps these)."""
    h, w = rgb.shape[:2]
    if w > max_width:
        rgb = cv2.resize(rgb, (max_width, max(1, round(h * max_width / w))), interpolation=cv2.INTER_AREA)
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2BGR),
                           [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise ValueError("could not encode the frame")
    return buf.tobytes()


def _box(img: np.ndarray, box: list[float], scale: float, color: tuple[int, int, int], width: int,
         text: str | None) -> None:
    x1, y1, x2, y2 = (int(round(v * scale)) for v in box[:4])
    cv2.rectangle(img, (x1, y1), (x2, y2), color, width)
    if text:
        (tw, th), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, 0.45, 1)
        y = max(th + base, y1)
        cv2.rectangle(img, (x1, y - th - base), (x1 + tw + 2, y), color, -1)
        cv2.putText(img, text, (x1 + 1, y - base), cv2.FONT_HERSHEY_SIMPLEX, 0.45, (255, 255, 255), 1, cv2.LINE_AA)


def draw_pair(jpeg: bytes, original_width: int, primary: Boxes, reference: Boxes, names: Mapping[int, str],
              banner: str = "") -> bytes:
    """The kept JPEG with the reference's and the primary's boxes (original pixels) drawn."""
    img = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
    if img is None:
        raise ValueError("the kept frame is not a JPEG")
    scale = img.shape[1] / max(1, original_width)
    pairs = match(reference, primary)
    found_ref, found_primary = {i for i, _, _ in pairs}, {j for _, j, _ in pairs}

    def label(side: str, b: list[float]) -> str:
        return f"{side} {names.get(int(b[5]), int(b[5]))} {b[4]:.2f}"

    for i, b in enumerate(reference):
        hit = i in found_ref
        _box(img, b, scale, MATCHED if hit else MISSED, 2 if hit else 3, None if hit else label("R missed", b))
    for j, b in enumerate(primary):
        hit = j in found_primary
        _box(img, b, scale, PRIMARY if hit else EXTRA, 1 if hit else 3, None if hit else label("P extra", b))
    if banner:
        cv2.rectangle(img, (0, 0), (img.shape[1], 22), (30, 30, 30), -1)
        cv2.putText(img, banner, (4, 16), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (255, 255, 255), 1, cv2.LINE_AA)
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 85])
    assert ok
    return buf.tobytes()
