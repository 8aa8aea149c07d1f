"""Draw detections, zones and triggered rules on a frame and encode it as JPEG.

Used by ``POST /detect?annotate=true`` (or ``Accept: image/jpeg``) and for the event
snapshots. Drawing is OpenCV only; the output JPEG has exactly the input frame's size.

Inputs are drawing primitives only: ``Detection`` boxes, ``ZoneOverlay`` zones (normalized
0..1 polygons, counting lines, exclusion masks) and ``alerts`` (zone name -> the names of its
triggered rules); a zone with an alert is drawn red and the rule names are written next to
it and in a banner. The drawing code knows nothing of the rules that produce them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import cv2
import numpy as np

from app.core.types import Detection

Points = tuple[tuple[float, float], ...]
Alerts = Mapping[str, Sequence[str]]  # zone name -> names of its triggered (open) rules


@dataclass(frozen=True, slots=True)
class ZoneOverlay:
    """A zone as drawn: its name, polygon, counting lines and exclusion masks (0..1 coordinates)."""

    name: str
    polygon: Points
    lines: tuple[Points, ...] = ()
    excludes: tuple[Points, ...] = ()

ZONE_COLOR = (255, 200, 0)       # BGR: cyan-ish for idle zones
ALERT_COLOR = (0, 0, 255)        # BGR: red for zones with a triggered rule
LINE_COLOR = (0, 220, 255)       # BGR: yellow for counting lines
MASK_COLOR = (128, 128, 128)     # BGR: grey hatching where a rule ignores detections
_PALETTE = [(56, 56, 255), (151, 157, 255), (31, 112, 255), (29, 178, 255), (49, 210, 207), (10, 249, 72),
            (23, 204, 146), (134, 219, 61), (52, 147, 26), (187, 212, 0), (168, 153, 44), (255, 194, 0),
            (147, 69, 52), (255, 115, 100), (236, 24, 0), (255, 56, 132), (133, 0, 82), (255, 56, 203),
            (200, 149, 255), (199, 55, 255)]


def alerts_of_pairs(pairs: Iterable[tuple[str, str]]) -> dict[str, list[str]]:
    """(zone, rule) pairs of open events -> the ``alerts`` mapping ``draw`` takes."""
    out: dict[str, list[str]] = {}
    for zone, rule in pairs:
        out.setdefault(zone, []).append(rule)
    return out


def _label(img: np.ndarray, text: str, x: int, y: int, color: tuple[int, int, int], scale: float) -> None:
    thickness = max(1, int(round(scale * 2)))
    (tw, th), base = cv2.getTextSize(text, cv2.FONT_HERSHEY_SIMPLEX, scale, thickness)
    h, w = img.shape[:2]
    x = int(min(max(0, x), max(0, w - tw - 2)))
    y = int(min(max(th + base + 2, y), h - 1))
    cv2.rectangle(img, (x, y - th - base - 2), (x + tw + 2, y), color, -1)
    cv2.putText(img, text, (x + 1, y - base), cv2.FONT_HERSHEY_SIMPLEX, scale, (255, 255, 255), thickness,
                cv2.LINE_AA)


def draw(frame_rgb: np.ndarray, detections: Sequence[Detection], zones: Iterable[ZoneOverlay] = (),
         alerts: Alerts | None = None, names: Mapping[int, str] | Sequence[str] | None = None) -> np.ndarray:
    """A BGR copy of ``frame_rgb`` with everything drawn on it."""
    img = cv2.cvtColor(np.ascontiguousarray(frame_rgb), cv2.COLOR_RGB2BGR)
    h, w = img.shape[:2]
    scale = max(0.4, min(w, h) / 900.0)
    line = max(1, int(round(min(w, h) / 400.0)))

    triggered = {zone: list(rules) for zone, rules in (alerts or {}).items() if rules}
    zones = list(zones)

    # zones: translucent fill + outline + name
    overlay = img.copy()
    zone_px = [(zone.name, np.round(np.asarray(zone.polygon, dtype=np.float64) * (w, h)).astype(np.int32))
               for zone in zones]
    for name, pts in zone_px:
        cv2.fillPoly(overlay, [pts], ALERT_COLOR if name in triggered else ZONE_COLOR)
    if zone_px:
        img = cv2.addWeighted(overlay, 0.2, img, 0.8, 0)
    img = _draw_masks(img, [m for zone in zones for m in zone.excludes], line, scale)
    for name, pts in zone_px:
        color = ALERT_COLOR if name in triggered else ZONE_COLOR
        cv2.polylines(img, [pts], True, color, line + 1, cv2.LINE_AA)
        text = name + (": " + ", ".join(triggered[name]) if name in triggered else "")
        top = pts[np.argmin(pts[:, 1])]
        _label(img, text, int(top[0]), int(top[1]), color, scale)

    # counting lines (line_crossing): open polylines, an arrow on the first segment towards the "in" side
    for zone in zones:
        for points in zone.lines:
            pts = np.round(np.asarray(points, dtype=np.float64) * (w, h)).astype(np.int32)
            color = ALERT_COLOR if zone.name in triggered else LINE_COLOR
            cv2.polylines(img, [pts], False, color, line + 2, cv2.LINE_AA)
            (ax, ay), (bx, by) = pts[0], pts[1]
            mid = np.array([(ax + bx) / 2.0, (ay + by) / 2.0])
            normal = np.array([-(by - ay), bx - ax], dtype=np.float64)  # the right-hand ("in") side, y down
            normal *= 0.04 * min(w, h) / max(np.hypot(*normal), 1e-9)
            cv2.arrowedLine(img, tuple(int(v) for v in mid), tuple(int(v) for v in mid + normal), color, line + 1,
                            cv2.LINE_AA, tipLength=0.4)

    # detections
    for det in detections:
        cls = det.class_id
        label = det.class_name
        if names is not None:
            try:
                label = names[cls]
            except (KeyError, IndexError):
                pass
        color = _PALETTE[cls % len(_PALETTE)]
        x1, y1, x2, y2 = (int(round(v)) for v in (det.x1, det.y1, det.x2, det.y2))
        cv2.rectangle(img, (x1, y1), (x2, y2), color, line, cv2.LINE_AA)
        _label(img, f"{label} {det.confidence:.2f}", x1, y1, color, scale * 0.8)

    # banner with the triggered rules
    if triggered:
        banner = "ALERT " + "; ".join(f"{z}: {', '.join(r)}" for z, r in triggered.items())
        _label(img, banner, 0, int(30 * scale) + 4, ALERT_COLOR, scale)
    return img


def _draw_masks(img: np.ndarray, masks: Sequence[Sequence[tuple[float, float]]], line: int,
                scale: float) -> np.ndarray:
    """Exclusion masks darkened and hatched, so a guard sees where detections do not count
    (a flag in the wind, a poster) instead of wondering why a person there raised nothing."""
    if not masks:
        return img
    h, w = img.shape[:2]
    shapes = [np.round(np.asarray(m, dtype=np.float64) * (w, h)).astype(np.int32) for m in masks]
    inside = np.zeros((h, w), np.uint8)
    cv2.fillPoly(inside, shapes, 255)
    hatch = np.zeros((h, w), np.uint8)
    step = max(8, int(min(w, h) / 40))
    for offset in range(-h, w, step):  # diagonal stripes, clipped to the masks below
        cv2.line(hatch, (offset, h), (offset + h, 0), 255, line)
    shaded = (img.astype(np.float32) * 0.55).astype(np.uint8)
    img = np.where(inside[..., None] > 0, shaded, img)
    img[(hatch > 0) & (inside > 0)] = MASK_COLOR
    for pts in shapes:
        cv2.polylines(img, [pts], True, MASK_COLOR, line, cv2.LINE_AA)
        top = pts[np.argmin(pts[:, 1])]
        _label(img, "ignored", int(top[0]), int(top[1]), MASK_COLOR, scale * 0.7)
    return img


def annotate_jpeg(frame_rgb: np.ndarray, detections: Sequence[Detection], zones: Iterable[ZoneOverlay] = (),
                  alerts: Alerts | None = None, names: Mapping[int, str] | Sequence[str] | None = None,
                  quality: int = 85) -> bytes:
    """JPEG bytes of the annotated frame (same width and height as ``frame_rgb``)."""
    img = draw(frame_rgb, detections, zones, alerts, names)
    ok, buf = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, int(quality)])
    if not ok:  # pragma: no cover - imencode fails only on empty images
        raise ValueError("JPEG encoding failed")
    return buf.tobytes()
