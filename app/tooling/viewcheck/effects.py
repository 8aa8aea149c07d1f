"""What tampering and ordinary life do to a camera picture, as image functions.

Each function takes a BGR uint8 view and returns a new one. Tampering: tape, a hand, spray
paint, a torch, a knocked lens (defocus). Ordinary life (the hard negatives): the IR-cut
switch, lights, rain, daylight. Sensor noise comes last, from ``Noise``.
"""

from __future__ import annotations

import cv2
import numpy as np


def _u8(img: np.ndarray) -> np.ndarray:
    return np.clip(img, 0, 255).astype(np.uint8)


def smooth_field(rng: np.random.Generator, shape: tuple[int, int], cells: int = 6) -> np.ndarray:
    """Low-frequency random field in [-1, 1] (blotches, tape fabric, uneven light)."""
    h, w = shape
    small = rng.uniform(-1, 1, (max(2, cells * h // w), cells)).astype(np.float32)
    return cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC).clip(-1, 1)


def gradient(shape: tuple[int, int], direction: float, strength: float) -> np.ndarray:
    """A linear light falloff across the frame: 1 +- strength, along ``direction`` (radians)."""
    h, w = shape
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    t = ((xx / w - 0.5) * np.cos(direction) + (yy / h - 0.5) * np.sin(direction))
    return (1 + 2 * strength * t).astype(np.float32)


def tape(view: np.ndarray, rng: np.random.Generator, colour: tuple[int, int, int], coverage: float) -> np.ndarray:
    """Opaque tape over the lens: a flat colour, faint fabric texture and uneven light; with
    ``coverage`` < 1 a strip of the (darkened) view stays visible at one edge."""
    h, w = view.shape[:2]
    shade = gradient((h, w), rng.uniform(0, 2 * np.pi), 0.12)[..., None]
    fabric = smooth_field(rng, (h, w), 40)[..., None] * 3
    out = np.asarray(colour, np.float32) * shade + fabric
    if coverage < 1:
        strip = int(round((1 - coverage) * h))
        out[h - strip:] = view[h - strip:] * 0.6
    return _u8(out)


def hand(view: np.ndarray, skin: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A hand held over the lens: skin from a real photo, far out of focus, little light
    getting in, a glow where light leaks past the fingers."""
    h, w = view.shape[:2]
    cy, cx = skin.shape[0] // 2, skin.shape[1] // 2
    half = int(min(cy, cx) * rng.uniform(0.5, 0.9))
    patch = skin[cy - half:cy + half, cx - half:cx + half]
    close = cv2.resize(patch, (w, h), interpolation=cv2.INTER_CUBIC).astype(np.float32)
    blurred = cv2.GaussianBlur(close, (0, 0), w / 18)
    leak = gradient((h, w), rng.uniform(0, 2 * np.pi), 0.5)[..., None]
    return _u8(blurred * rng.uniform(0.35, 0.6) * leak)


def spray(view: np.ndarray, rng: np.random.Generator, paint: tuple[int, int, int], amount: float) -> np.ndarray:
    """Spray paint on the lens: the picture smeared and darkened under a blotchy coat.
    ``amount`` 0..1 lets the coat build up over a few frames."""
    h, w = view.shape[:2]
    blurred = cv2.GaussianBlur(view.astype(np.float32), (0, 0), max(0.5, amount * w / 10))
    coat = np.clip(0.55 + 0.45 * smooth_field(rng, (h, w), 5), 0, 1)[..., None] * amount
    painted = blurred * (1 - 0.6 * amount) * (1 - coat) + np.asarray(paint, np.float32) * coat
    return _u8(painted)


def torch(view: np.ndarray, centre: tuple[float, float], radius: float) -> np.ndarray:
    """A torch or laser into the lens: a burnt-out glow with a flare streak; the camera's
    exposure drops, so the rest of the picture goes darker."""
    h, w = view.shape[:2]
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    d2 = ((xx - centre[0] * w) ** 2 + (yy - centre[1] * h) ** 2) / (radius * w) ** 2
    glow = 700 * np.exp(-d2 * 1.6) + 90 * np.exp(-np.abs(yy - centre[1] * h) / (0.02 * h))
    return _u8(view.astype(np.float32) * 0.55 + glow[..., None])


def defocus(view: np.ndarray, sigma: float) -> np.ndarray:
    """A lens knocked out of focus (brightness and colour unchanged)."""
    return cv2.GaussianBlur(view, (0, 0), sigma)


def infrared(view: np.ndarray, jump: float) -> np.ndarray:
    """Night mode after the IR-cut switch: no colour, foliage and skin bright under IR
    (red-heavy mix), the exposure settling ``jump`` times brighter than the day picture
    (at most mid-grey 170: the camera's exposure control does not let it burn out)."""
    mix = view[..., 2] * 0.55 + view[..., 1] * 0.3 + view[..., 0] * 0.15
    target = min(170.0, jump * float(view.mean()))
    grey = _u8(mix * (target / max(float(mix.mean()), 1.0)))
    return cv2.merge([grey, grey, grey])


def light(view: np.ndarray, factor: float, warmth: float = 0.0) -> np.ndarray:
    """Scale the light (lights on/off, daylight); ``warmth`` > 0 shifts to orange, < 0 to blue."""
    tint = np.array([1 - 0.25 * warmth, 1.0, 1 + 0.25 * warmth], np.float32)
    return _u8(view.astype(np.float32) * factor * tint)


def rain(view: np.ndarray, rng: np.random.Generator, drops: int = 260) -> np.ndarray:
    """Rain: bright slanted streaks in front of a hazier scene."""
    h, w = view.shape[:2]
    streaks = np.zeros((h, w), np.float32)
    xs, ys = rng.uniform(-0.2 * w, w, drops), rng.uniform(0, h, drops)
    lengths = rng.uniform(0.04, 0.1, drops) * h
    for x, y, length in zip(xs, ys, lengths, strict=True):
        cv2.line(streaks, (int(x), int(y)), (int(x + 0.25 * length), int(y + length)), 1.0, 1, cv2.LINE_AA)
    hazy = view.astype(np.float32) * 0.85 + 18
    return _u8(hazy + 70 * streaks[..., None])


class Noise:
    """Sensor noise from a fixed bank of fields (fast: no new random field per frame)."""

    def __init__(self, rng: np.random.Generator, shape: tuple[int, int, int], bank: int = 12):
        self.rng = rng
        self.fields = [rng.normal(0, 1, shape).astype(np.float32) for _ in range(bank)]

    def __call__(self, img: np.ndarray, sigma: float) -> np.ndarray:
        if sigma <= 0:
            return img
        field = self.fields[int(self.rng.integers(len(self.fields)))]
        shift = int(self.rng.integers(field.shape[1]))
        return _u8(img + sigma * np.roll(field, shift, axis=1))
