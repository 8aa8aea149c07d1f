"""Helpers for the view-check tests: real photos as a camera's view, fed to a monitor on
capture times that the test chooses (never the clock)."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from app.rules.logic.view import ViewMonitor, ViewTransition
from app.tooling.viewcheck import effects
from app.tooling.viewcheck.scenes import View, coco_images, read_image

T0 = dt.datetime(2026, 3, 2, 17, 0, tzinfo=dt.timezone.utc)
Effect = Callable[[np.ndarray], np.ndarray]


@dataclass
class Camera:
    """A fixed camera on a real COCO photo: noisy, JPEG round trip, like a posted frame."""

    view: View
    rng: np.random.Generator

    @classmethod
    def on(cls, dataset: Path, index: int = 0, size: tuple[int, int] = (320, 240), seed: int = 0) -> Camera:
        return cls(View.of(read_image(coco_images(dataset)[index]), size), np.random.default_rng(seed))

    def frame(self, effect: Effect | None = None, dx: float = 0.0, angle: float = 0.0,
              noise: float = 2.0) -> np.ndarray:
        img = self.view.render(dx, 0.0, angle)
        if effect is not None:
            img = effect(img)
        if noise:
            img = np.clip(img + self.rng.normal(0, noise, img.shape), 0, 255).astype(np.uint8)
        ok, jpeg = cv2.imencode(".jpg", img, [cv2.IMWRITE_JPEG_QUALITY, 85])
        assert ok
        return cv2.imdecode(jpeg, cv2.IMREAD_COLOR)


def tape(img: np.ndarray) -> np.ndarray:
    return effects.tape(img, np.random.default_rng(1), (40, 60, 170), 1.0)


def at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def feed(monitor: ViewMonitor, frames: Iterable[tuple[float, np.ndarray, list]]) -> list[ViewTransition]:
    out: list[ViewTransition] = []
    for t, frame, boxes in frames:
        out += monitor.observe(at(t), frame, boxes)
    return out


def learned(monitor: ViewMonitor, camera: Camera, seconds: float = 30.0, step: float = 2.0) -> float:
    """Healthy frames until the reference is learned; returns the next free second."""
    t = 0.0
    while t < seconds:
        assert monitor.observe(at(t), camera.frame()) == []
        t += step
    assert monitor.state().learned["day"] is not None
    return t


def started(transitions: list[ViewTransition]) -> list[tuple[str, float]]:
    return [(t.kind, (t.at - T0).total_seconds()) for t in transitions if t.state == "started"]
