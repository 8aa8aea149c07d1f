"""The before/after pair of a view problem as one side-by-side JPEG.

Why one image and not two: an event then has one snapshot like every other event (one
file, one URL in the webhook and MQTT payload, one image in a Home Assistant
notification or a chat message), before and after can never be separated or mixed up
with another event's, and the operator compares them at a glance. Reference on the left
("BEFORE"), the frame that raised the problem on the right ("NOW"), each under a label
bar with what and when; both at the same height, at most 480 px wide each (as the monitor
keeps them), so the file stays small (typically 40-80 kB).
"""

from __future__ import annotations

import datetime as dt

import cv2
import numpy as np

from app.rules.logic.view.state import ViewTransition

BAR = 28
GAP = 6
FONT = cv2.FONT_HERSHEY_SIMPLEX


def _bgr(img: np.ndarray, rgb: bool) -> np.ndarray:
    if img.ndim == 2:
        return cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
    return cv2.cvtColor(img, cv2.COLOR_RGB2BGR) if rgb else img


def _panel(img: np.ndarray | None, label: str, height: int, colour: tuple[int, int, int], rgb: bool) -> np.ndarray:
    if img is None:
        body: np.ndarray = np.full((height, height * 4 // 3, 3), 64, np.uint8)
        cv2.putText(body, "no reference yet", (10, height // 2), FONT, 0.6, (220, 220, 220), 1, cv2.LINE_AA)
    else:
        img = _bgr(img, rgb)
        h, w = img.shape[:2]
        body = cv2.resize(img, (max(1, round(w * height / h)), height),
                          interpolation=cv2.INTER_AREA if h > height else cv2.INTER_LINEAR)
    bar = np.zeros((BAR, body.shape[1], 3), np.uint8)
    bar[:] = colour
    text = label.encode("ascii", "replace").decode()
    while text and cv2.getTextSize(text, FONT, 0.5, 1)[0][0] > body.shape[1] - 12:
        text = text[:-2] + "~"
    cv2.putText(bar, text, (6, BAR - 9), FONT, 0.5, (255, 255, 255), 1, cv2.LINE_AA)
    return np.vstack([bar, body])


def side_by_side(reference: np.ndarray | None, current: np.ndarray, before_label: str, after_label: str,
                 *, rgb: bool = False, height: int = 360, quality: int = 85) -> bytes:
    """JPEG bytes: ``reference`` left under ``before_label``, ``current`` right under
    ``after_label``. ``rgb``: the arrays are RGB (default BGR, OpenCV's order)."""
    if not 16 <= height <= 2160 or not 1 <= quality <= 100:
        raise ValueError("height must be 16..2160 and quality 1..100")
    left = _panel(reference, before_label, height, (90, 90, 90), rgb)
    right = _panel(current, after_label, height, (0, 0, 170), rgb)
    gap = np.full((left.shape[0], GAP, 3), 255, np.uint8)
    ok, jpeg = cv2.imencode(".jpg", np.hstack([left, gap, right]), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise RuntimeError("JPEG encoding failed")
    return jpeg.tobytes()


def _stamp(when: dt.datetime) -> str:
    return when.astimezone(dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%SZ")


def render_transition(tr: ViewTransition, camera_id: str, learned_at: dt.datetime | None = None,
                      *, rgb: bool = False) -> bytes:
    """The pair of a ``started`` transition, labelled with camera, kind, mode and times."""
    if tr.state != "started" or tr.current_image is None:
        raise ValueError("only a started transition carries a before/after pair")
    before = f"BEFORE  {camera_id}  reference ({tr.mode or '?'})"
    if learned_at is not None:
        before += f"  {_stamp(learned_at)}"
    after = f"NOW  {tr.kind}  since {_stamp(tr.since)}"
    return side_by_side(tr.reference_image, tr.current_image, before, after, rgb=rgb)
