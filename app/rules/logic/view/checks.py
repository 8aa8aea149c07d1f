"""One check: which problems does this frame show against the reference, before persistence?

The answer per kind is True (the problem shows), False (it does not) or None (cannot
tell: vetoed by a large object near the lens, or no reference yet). At most one of
blinded / covered / moved / defocused is True, in that order of priority: a camera with a
torch in its lens is not also "covered", a taped one is not also "defocused". "Moved" is
a shift or roll that the motion search explains, or a view turned away altogether (not
covered: there is structure, but none of the reference's).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np

from app.rules.logic.view.features import FrameFeatures
from app.rules.logic.view.motion import Motion
from app.rules.logic.view.reference import Reference, texture
from app.rules.site.viewchecks import Thresholds

Box = Sequence[float]  # (x1, y1, x2, y2, confidence), normalised to 0..1
VETOED = ("covered", "moved", "defocused")


@dataclass
class Verdict:
    raw: dict[str, bool | None]
    metrics: dict[str, float] = field(default_factory=dict)
    motion: Motion | None = None

    @property
    def healthy(self) -> bool:
        """Every kind judged and none shows (the reference may follow this view)."""
        return all(v is False for k, v in self.raw.items() if k != "frozen")


def box_weight(boxes: Iterable[Box], size: tuple[int, int]) -> np.ndarray:
    """1 where the scene is visible, 0 under detected objects (they are not the scene)."""
    w, h = size
    weight = np.ones((h, w), np.float32)
    for b in boxes:
        x1, y1, x2, y2 = (min(1.0, max(0.0, float(v))) for v in b[:4])
        weight[int(y1 * h):int(np.ceil(y2 * h)), int(x1 * w):int(np.ceil(x2 * w))] = 0
    return weight


def largest_box(boxes: Iterable[Box], min_confidence: float) -> float:
    """Area share of the largest confident box (a person or truck right at the lens)."""
    areas = [max(0.0, min(1.0, b[2]) - max(0.0, b[0])) * max(0.0, min(1.0, b[3]) - max(0.0, b[1]))
             for b in boxes if len(b) < 5 or b[4] >= min_confidence]
    return max(areas, default=0.0)


def blinded(f: FrameFeatures, baseline: float, th: Thresholds) -> bool:
    return f.saturated - baseline >= th.blinded_saturated


def covered(f: FrameFeatures, ref: Reference, still: float, th: Thresholds) -> tuple[bool, dict[str, float]]:
    """The layout is gone and so is the structure (tape, a hand), or the structure is gone
    and what is left is smeared, dim for its brightness and darker than the reference
    (paint: a lens knocked out of focus smears as much but keeps its brightness)."""
    detail = f.detail / ref.detail
    tex = texture(f) / ref.texture
    dim = max(f.mean, 8.0) / max(ref.mean, 8.0)
    hit = (still < th.covered_still and detail < th.covered_detail) or \
          (detail < th.smeared_detail and tex < th.smeared_texture and dim < th.smeared_dim)
    return hit, {"still": still, "detail": detail, "texture": tex, "brightness": dim}


def judge(f: FrameFeatures, ref: Reference | None, fallback: Reference | None, boxes: Sequence[Box],
          vetoed: bool, th: Thresholds) -> Verdict:
    """Judge one frame against the reference of its light mode (``ref``). With none learned
    yet, what survives a change of light is judged against the other mode's (``fallback``):
    blinded, covered, and turned away (moved without the motion search); with no
    reference at all, nothing is; against a flat one (an accepted black view), blinded only."""
    base = ref or fallback
    raw: dict[str, bool | None] = {k: None for k in ("blinded", "covered", "moved", "defocused")}
    metrics: dict[str, float] = {"saturated": f.saturated}
    if base is None:  # even "blinded" is relative: some scenes are half burnt-out by nature
        return Verdict(raw, metrics)
    raw["blinded"] = blinded(f, base.saturated, th)
    if base.flat:  # no structure to lose, no layout to move, no detail to blur
        return Verdict(raw, metrics)
    weight = box_weight(boxes, base.motion.size)
    current = base.motion.shrink(f.grey)
    still = base.motion.still(current, weight)
    raw["covered"], more = covered(f, base, still, th)
    metrics.update(more)
    verdict = Verdict(raw, metrics)
    raw["moved"] = False if ref is not None else None
    if still < th.moved_gate and not raw["blinded"] and not raw["covered"]:
        explained = False
        if ref is not None:
            m = ref.motion.estimate(current, weight, still)
            verdict.motion = m
            metrics.update({"shift": m.shift, "angle": m.angle, "aligned": m.aligned})
            explained = m.aligned >= th.moved_aligned
            raw["moved"] = explained and (m.shift >= th.moved_shift or abs(m.angle) >= th.moved_angle)
        if not explained:  # not covered, no motion explains it: is anything of the reference left?
            structure = base.motion.structure(current, weight)
            metrics["structure"] = structure
            if structure < th.replaced_structure:
                raw["moved"] = True
    if ref is not None:
        sharp = f.sharpness / ref.sharpness
        metrics["sharpness"] = sharp
        raw["defocused"] = sharp < th.defocus_sharpness
    _one_at_most(raw)
    if vetoed:
        for kind in VETOED:
            raw[kind] = None
    return verdict


def _one_at_most(raw: dict[str, bool | None]) -> None:
    seen = False
    for kind in ("blinded", "covered", "moved", "defocused"):
        if seen and raw[kind]:
            raw[kind] = False
        seen = seen or bool(raw[kind])
