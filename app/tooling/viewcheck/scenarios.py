"""The scenarios of the view-check test set: what the camera sees at capture time ``t``.

Every scenario starts with a healthy view long enough to learn the reference (people walk
past now and then, the sensor is noisy, the mount shakes a little), then either tampers
with the camera (``kind`` is the problem it must raise) or does something ordinary that
must not raise anything (the hard negatives).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from app.tooling.viewcheck import effects
from app.tooling.viewcheck.scenes import Sprite, View, paste

Box = tuple[float, float, float, float, float]
ONSET = 100.0  # the tampering starts here (after the reference is learned: 60 s by default)
TAMPER_S = 60.0
FROZEN_S = 90.0
AFTER_S = 40.0  # healthy again afterwards, so the problem must end
WALK_PERIOD_S, WALK_S = 50.0, 16.0


@dataclass
class Ctx:
    """One sequence's fixed draw: the view, its people, random parameters, the noise bank."""

    view: View
    rng: np.random.Generator
    noise: effects.Noise
    people: tuple[Sprite, ...]
    skin: np.ndarray
    params: dict = field(default_factory=dict)
    elsewhere: View | None = None  # what the camera sees when turned away (another photo)

    @property
    def size(self) -> tuple[int, int]:
        return self.view.out


Render = Callable[[Ctx, float], tuple[np.ndarray, list[Box], float]]


@dataclass(frozen=True)
class Scenario:
    name: str
    category: Literal["tamper", "negative"]
    kind: str | None  # the problem a tamper sequence must raise
    duration: float
    render: Render
    onset: float | None = None  # tamper: when the true state stops being healthy
    restore: float | None = None  # tamper: when it is healthy again
    draw: Callable[[np.random.Generator], dict] = lambda rng: {}


def walker(ctx: Ctx, img: np.ndarray, t: float, boxes: list[Box]) -> None:
    """A person crossing the view at a distance every WALK_PERIOD_S (its box as detected)."""
    phase = (t + ctx.params["walk_offset"]) % WALK_PERIOD_S
    if phase > WALK_S:
        return
    w, h = ctx.size
    sprite = ctx.people[int((t + ctx.params["walk_offset"]) // WALK_PERIOD_S) % len(ctx.people)]
    x = -0.1 * w + 1.2 * w * phase / WALK_S
    x = x if ctx.params["walk_left"] else w - x
    box = paste(img, sprite, x, 0.92 * h, 0.42 * h)
    if box is not None:
        boxes.append((*box, 0.82))


def live(ctx: Ctx, t: float, dx: float = 0.0, dy: float = 0.0, angle: float = 0.0,
         walkers: bool = True) -> tuple[np.ndarray, list[Box]]:
    """The healthy view at ``t``: mount shake of a fraction of a pixel, people passing."""
    jx, jy = ctx.rng.normal(0, 0.0015, 2)
    img = ctx.view.render(dx + jx, dy + jy, angle)
    boxes: list[Box] = []
    if walkers:
        walker(ctx, img, t, boxes)
    return img, boxes


def sensor(ctx: Ctx) -> float:
    return ctx.params["noise"]


def tampered(effect: Callable[[Ctx, np.ndarray, float], np.ndarray], keep_boxes: bool = False) -> Render:
    """Healthy until ONSET, ``effect`` (given the time since onset) until the restore time."""
    def render(ctx: Ctx, t: float) -> tuple[np.ndarray, list[Box], float]:
        img, boxes = live(ctx, t)
        if ONSET <= t < ONSET + TAMPER_S:
            return effect(ctx, img, t - ONSET), boxes if keep_boxes else [], sensor(ctx)
        return img, boxes, sensor(ctx)
    return render


def moved(ctx: Ctx, t: float) -> tuple[np.ndarray, list[Box], float]:
    if ONSET <= t < ONSET + TAMPER_S:
        img, boxes = live(ctx, t, ctx.params["dx"], ctx.params["dy"], ctx.params["angle"])
    else:
        img, boxes = live(ctx, t)
    return img, boxes, sensor(ctx)


def moved_away(ctx: Ctx, t: float) -> tuple[np.ndarray, list[Box], float]:
    """Turned to face somewhere else entirely: nothing of the reference is left in view."""
    if ONSET <= t < ONSET + TAMPER_S and ctx.elsewhere is not None:
        img = ctx.elsewhere.render(*ctx.rng.normal(0, 0.0015, 2))
        boxes: list[Box] = []
        walker(ctx, img, t, boxes)
        return img, boxes, sensor(ctx)
    img, boxes = live(ctx, t)
    return img, boxes, sensor(ctx)


def ir_switch(ctx: Ctx, t: float) -> tuple[np.ndarray, list[Box], float]:
    """Dusk (light falls from 80 s), the IR-cut switch at 110 s (grey, brighter, noisier),
    night until 250 s (long enough to learn the night reference), then dawn: colour again."""
    img, boxes = live(ctx, t)
    if t < 80:
        return img, boxes, sensor(ctx)
    if t < 110:
        return effects.light(img, 1 - 0.55 * (t - 80) / 30, 0.3), boxes, sensor(ctx) + 1
    if t < 250:
        return effects.infrared(img, ctx.params["ir_jump"]), boxes, sensor(ctx) + 2.5
    return effects.light(img, 0.6, 0.2), boxes, sensor(ctx) + 1


def lights(ctx: Ctx, t: float) -> tuple[np.ndarray, list[Box], float]:
    """Lights off at 100 s and 180 s, on again at 140 s and 220 s (the camera stays in colour)."""
    img, boxes = live(ctx, t)
    if 100 <= t < 140 or 180 <= t < 220:
        return effects.light(img, ctx.params["dark"], 0.4), boxes, sensor(ctx) + 2
    return img, boxes, sensor(ctx)


def person_at_lens(ctx: Ctx, t: float) -> tuple[np.ndarray, list[Box], float]:
    """A person walks up to the camera, stands at the lens filling the view, walks away.
    The detector finds them in most frames (every 7th frame it misses, as detectors do)."""
    img, boxes = live(ctx, t, walkers=not 95 <= t < 170)
    if 100 <= t < 165:
        w, h = ctx.size
        near = min(1.0, (t - 100) / 20) if t < 145 else max(0.0, 1 - (t - 145) / 20)
        height = h * (0.5 + 2.7 * near)
        cx = w * (ctx.params["lens_x"] + (0.5 - ctx.params["lens_x"]) * near)
        box = paste(img, ctx.people[ctx.params["who"]], cx, h * (0.95 + 1.1 * near), height)
        if box is not None and int(t * 10) % 7 != 3:
            boxes.append((*box, 0.78))
    return img, boxes, sensor(ctx)


def rain(ctx: Ctx, t: float) -> tuple[np.ndarray, list[Box], float]:
    img, boxes = live(ctx, t)
    if t >= 100:
        return effects.rain(img, ctx.rng, ctx.params["drops"]), boxes, sensor(ctx) + 2
    return img, boxes, sensor(ctx)


def daylight(ctx: Ctx, t: float) -> tuple[np.ndarray, list[Box], float]:
    """Evening light over the whole sequence: half as bright and warmer at the end."""
    img, boxes = live(ctx, t)
    f = min(1.0, t / 300)
    return effects.light(img, 1 - 0.5 * f, 0.6 * f), boxes, sensor(ctx) + f


def crowd(ctx: Ctx, t: float) -> tuple[np.ndarray, list[Box], float]:
    """A group of 10 passes through the middle distance between 100 s and 150 s."""
    img, boxes = live(ctx, t, walkers=not 95 <= t < 155)
    if 100 <= t < 150:
        w, h = ctx.size
        for i, (start, speed, depth) in enumerate(ctx.params["crowd"]):
            x = (start + speed * (t - 100)) * w
            box = paste(img, ctx.people[i % len(ctx.people)], x, h * (0.7 + 0.3 * depth), h * (0.35 + 0.4 * depth))
            if box is not None:
                boxes.append((*box, 0.7))
    return img, boxes, sensor(ctx)


def static_scene(ctx: Ctx, t: float) -> tuple[np.ndarray, list[Box], float]:
    """A noiseless encoder watching an empty scene: identical frames, except (with
    ``passer``) one person crossing at 100 s."""
    img = ctx.view.render()
    boxes: list[Box] = []
    if ctx.params["passer"] and 100 <= t < 116:
        box = paste(img, ctx.people[0], ctx.size[0] * (-0.1 + 1.2 * (t - 100) / 16), 0.92 * ctx.size[1],
                    0.42 * ctx.size[1])
        if box is not None:
            boxes.append((*box, 0.82))
    return img, boxes, 0.0


def _tape(rng: np.random.Generator) -> dict:
    colours = [(28, 28, 30), (70, 110, 150), (150, 150, 150), (40, 60, 170), (210, 205, 200)]
    return {"colour": colours[int(rng.integers(len(colours)))], "coverage": float(rng.choice([1.0, 0.9]))}


def _move(rng: np.random.Generator, rotate: bool) -> dict:
    theta = rng.uniform(0, 2 * np.pi)
    size = rng.uniform(0.10, 0.30)
    if rotate:
        return {"dx": 0.0, "dy": 0.0, "angle": float(rng.choice([-1, 1]) * rng.uniform(3, 10))}
    return {"dx": float(size * np.cos(theta)), "dy": float(0.6 * size * np.sin(theta)), "angle": 0.0}


def _crowd(rng: np.random.Generator) -> dict:
    return {"crowd": [(float(rng.uniform(-0.6, -0.05)), float(rng.uniform(0.02, 0.035)), float(rng.uniform(0, 1)))
                      for _ in range(10)]}


def _glow(ctx: Ctx, img: np.ndarray, since: float) -> np.ndarray:
    return effects.torch(img, ctx.params["centre"], ctx.params["radius"])


TAMPERS = [
    Scenario("covered_tape", "tamper", "covered", ONSET + TAMPER_S + AFTER_S,
             tampered(lambda c, img, s: effects.tape(img, c.rng, c.params["colour"], c.params["coverage"])),
             ONSET, ONSET + TAMPER_S, _tape),
    Scenario("covered_hand", "tamper", "covered", ONSET + TAMPER_S + AFTER_S,
             tampered(lambda c, img, s: effects.hand(img, c.skin, c.rng)), ONSET, ONSET + TAMPER_S),
    Scenario("covered_spray", "tamper", "covered", ONSET + TAMPER_S + AFTER_S,
             tampered(lambda c, img, s: effects.spray(img, c.rng, c.params["paint"], min(1.0, 0.4 + s / 5))),
             ONSET, ONSET + TAMPER_S,
             lambda rng: {"paint": [(30, 30, 30), (20, 20, 140), (160, 60, 20), (40, 120, 40)][int(rng.integers(4))]}),
    Scenario("blinded", "tamper", "blinded", ONSET + TAMPER_S + AFTER_S, tampered(_glow),
             ONSET, ONSET + TAMPER_S,
             lambda rng: {"centre": (float(rng.uniform(0.3, 0.7)), float(rng.uniform(0.3, 0.7))),
                          "radius": float(rng.uniform(0.35, 0.6))}),
    Scenario("moved_shift", "tamper", "moved", ONSET + TAMPER_S + AFTER_S, moved,
             ONSET, ONSET + TAMPER_S, lambda rng: _move(rng, False)),
    Scenario("moved_rotate", "tamper", "moved", ONSET + TAMPER_S + AFTER_S, moved,
             ONSET, ONSET + TAMPER_S, lambda rng: _move(rng, True)),
    Scenario("defocused", "tamper", "defocused", ONSET + TAMPER_S + AFTER_S,
             tampered(lambda c, img, s: effects.defocus(img, c.params["sigma"] * img.shape[1]), keep_boxes=True),
             ONSET, ONSET + TAMPER_S, lambda rng: {"sigma": float(rng.uniform(0.012, 0.02))}),
    # frozen: rendered by the sequence (the last live frame repeated byte for byte)
    Scenario("frozen", "tamper", "frozen", ONSET + FROZEN_S + AFTER_S, tampered(lambda c, img, s: img),
             ONSET, ONSET + FROZEN_S),
]

NEGATIVES = [
    Scenario("ir_switch", "negative", None, 290.0, ir_switch,
             draw=lambda rng: {"ir_jump": float(rng.uniform(1.0, 1.4))}),
    Scenario("lights", "negative", None, 260.0, lights, draw=lambda rng: {"dark": float(rng.uniform(0.2, 0.35))}),
    Scenario("person_at_lens", "negative", None, 200.0, person_at_lens,
             draw=lambda rng: {"lens_x": float(rng.uniform(0.2, 0.8)), "who": int(rng.integers(5))}),
    Scenario("rain", "negative", None, 200.0, rain, draw=lambda rng: {"drops": int(rng.integers(150, 400))}),
    Scenario("daylight", "negative", None, 300.0, daylight),
    Scenario("crowd", "negative", None, 200.0, crowd, draw=_crowd),
    Scenario("static_scene", "negative", None, 240.0, static_scene,
             draw=lambda rng: {"passer": bool(rng.integers(2))}),
]

# Added after the first set-aside run, at the end so that no earlier sequence changes its image.
LATER = [
    Scenario("moved_away", "tamper", "moved", ONSET + TAMPER_S + AFTER_S, moved_away, ONSET, ONSET + TAMPER_S),
]
TAMPERS += LATER

SCENARIOS: dict[str, Scenario] = {s.name: s for s in TAMPERS[:-len(LATER)] + NEGATIVES + LATER}
