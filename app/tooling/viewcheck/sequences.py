"""The labelled test set: per camera sequence, frames with capture times and the true state.

``build(dataset)`` lays the scenarios over the COCO images in name order: scenario ``s``,
copy ``j`` uses image ``s * per_scenario + j``; an image whose position in that order is
``2 mod 3`` (every third image) puts its sequence in the **set-aside** part, fixed before
any tuning; the rest is the **tuned** part. ``build(..., fresh=True)`` gives the **fresh**
part: two sequences per scenario on the images after those (90..119 with the defaults),
added after the set-aside part had been run once, to confirm the one fix it led to
(docs/rules.md, "Camera view checks", tells the story). Frames are made lazily (nothing is cached on disk)
and go through a JPEG round trip like a posted frame.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import cv2
import numpy as np

from app.tooling.viewcheck import effects
from app.tooling.viewcheck.scenarios import SCENARIOS, Box, Ctx, Scenario
from app.tooling.viewcheck.scenes import View, coco_images, hand, people, read_image

SIZE = (320, 240)
JPEG_QUALITY = 85
ELSEWHERE = 61  # a camera turned away shows the image this many places further on
Part = Literal["tuned", "set_aside", "fresh"]


@dataclass(frozen=True)
class Frame:
    t: float  # seconds since the sequence started (capture time)
    image: np.ndarray  # BGR uint8, as decoded from the posted JPEG
    boxes: tuple[Box, ...]  # the detector's boxes: normalised (x1, y1, x2, y2, confidence)
    truth: str  # "healthy" or the problem kind that is true at t


@dataclass(frozen=True)
class Sequence:
    name: str
    scenario: str
    source: Path
    index: int  # the source image's position in name order
    fps: float
    dataset: Path
    part: Part

    @property
    def spec(self) -> Scenario:
        return SCENARIOS[self.scenario]

    @property
    def seed(self) -> int:
        return zlib.crc32(self.name.encode())

    def truth(self, t: float) -> str:
        spec = self.spec
        if spec.kind is not None and spec.onset is not None and spec.restore is not None \
                and spec.onset <= t < spec.restore:
            return spec.kind
        return "healthy"

    def frames(self, size: tuple[int, int] = SIZE) -> Iterator[Frame]:
        """The frames at ``fps`` from 0 to the scenario's duration (made one by one)."""
        rng = np.random.default_rng(self.seed)
        spec = self.spec
        params = {"noise": float(rng.uniform(1.5, 2.5)), "walk_offset": float(rng.uniform(0, 50)),
                  "walk_left": bool(rng.integers(2)), **spec.draw(rng)}
        images = coco_images(self.dataset)
        elsewhere = View.of(read_image(images[(self.index + ELSEWHERE) % len(images)]), size)
        ctx = Ctx(View.of(read_image(self.source), size), rng, effects.Noise(rng, (size[1], size[0], 3)),
                  people(self.dataset), hand(), params, elsewhere)
        last: Frame | None = None
        for i in range(int(spec.duration * self.fps)):
            t = i / self.fps
            truth = self.truth(t)
            if truth == "frozen" and last is not None:
                yield Frame(t, last.image, last.boxes, truth)  # the same picture, byte for byte
                continue
            img, boxes, sigma = spec.render(ctx, t)
            ok, jpeg = cv2.imencode(".jpg", ctx.noise(img, sigma), [cv2.IMWRITE_JPEG_QUALITY, JPEG_QUALITY])
            if not ok:
                raise RuntimeError("JPEG encoding failed")
            decoded = cv2.imdecode(jpeg, cv2.IMREAD_COLOR)
            if decoded is None:
                raise RuntimeError("JPEG decoding failed")
            last = Frame(t, decoded, tuple(boxes), truth)
            yield last


def build(dataset: Path, per_scenario: int = 6, scenarios: list[str] | None = None,
          fresh: bool = False) -> list[Sequence]:
    """The sequences of the test set (see the module docstring for the parts)."""
    images = coco_images(dataset)
    out = []
    first = len(SCENARIOS) * per_scenario if fresh else 0
    copies = 2 if fresh else per_scenario
    for s, name in enumerate(SCENARIOS):
        if scenarios is not None and name not in scenarios:
            continue
        for j in range(copies):
            index = (first + s * copies + j) % len(images)
            part: Part = "fresh" if fresh else "set_aside" if index % 3 == 2 else "tuned"
            name_j = f"{name}-{'f' if fresh else ''}{j}"
            out.append(Sequence(name_j, name, images[index], index, 2.0 if j in (1, 5) else 1.0, Path(dataset), part))
    return out
