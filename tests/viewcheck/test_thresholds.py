"""Each threshold of the default sensitivity, pinned by a pair of real-photo frames just
either side of it (single-frame judgements against a reference learned from noisy JPEG
frames of the same photo). The bands asserted on the measures say why each frame is a
good witness: halving or doubling a threshold flips at least one of these verdicts."""

from __future__ import annotations

import numpy as np
import pytest

from app.rules.logic.view import ViewCheckOptions, ViewMonitor
from app.rules.logic.view.checks import Verdict, judge
from app.rules.logic.view.features import analyse
from app.tooling.viewcheck import effects
from app.tooling.viewcheck.scenes import View, coco_images, read_image
from app.rules.site.viewchecks import THRESHOLDS
from app.rules.logic.view.reference import Reference
from tests.support.viewcheck import Camera, feed, learned, started

TH = THRESHOLDS["normal"]
# The documented defaults (docs/rules.md ("Camera view checks")), written out: the bands below say where each
# witness frame's measure lies whatever the code's thresholds are; only verdicts use TH.
DOC = {"blinded_saturated": 0.35, "covered_still": 0.6, "covered_detail": 0.5, "smeared_detail": 0.3,
       "smeared_texture": 0.45, "smeared_dim": 0.85, "moved_gate": 0.9, "moved_aligned": 0.8, "moved_shift": 0.05, "moved_angle": 2.5,
       "replaced_structure": 0.3, "defocus_sharpness": 0.15, "frozen_tolerance": 0.6}


@pytest.fixture(scope="module")
def bench(dataset):
    """(camera, reference, judge-one-frame, another photo) on COCO image 3."""
    camera = Camera.on(dataset, 3)
    ref = Reference.of([analyse(camera.frame()) for _ in range(10)], camera.frame(), None)
    other = View.of(read_image(coco_images(dataset)[64])).render()

    def verdict(img: np.ndarray) -> Verdict:
        return judge(analyse(camera.frame(lambda _: img)), ref, None, [], False, TH)
    return camera, ref, verdict, other


def raised(v: Verdict) -> list[str]:
    return [k for k, hit in v.raw.items() if hit]


def disc(img: np.ndarray, share: float) -> np.ndarray:
    h, w = img.shape[:2]
    yy, xx = np.mgrid[0:h, 0:w]
    out = img.copy()
    out[(xx - w / 2) ** 2 + (yy - h / 2) ** 2 < share * w * h / np.pi] = 255
    return out


def test_blinded_needs_35_percent_more_burnt_out(bench):
    camera, ref, verdict, _ = bench
    base = camera.view.render()
    small, large = verdict(disc(base, 0.2)), verdict(disc(base, 0.6))
    assert 0.5 * DOC["blinded_saturated"] < small.metrics["saturated"] - ref.saturated < DOC["blinded_saturated"]
    assert raised(small) == []
    assert DOC["blinded_saturated"] < large.metrics["saturated"] - ref.saturated < 2 * DOC["blinded_saturated"]
    assert raised(large) == ["blinded"]


def test_covered_when_layout_and_structure_are_gone(bench):
    """Grey tape over the left 60 %: layout and structure both below their thresholds,
    but not so far that the paint rule would catch it instead."""
    camera, _, verdict, _ = bench
    base = camera.view.render()
    taped = base.copy()
    taped[:, :192] = effects.tape(base, np.random.default_rng(1), (150, 150, 150), 1.0)[:, :192]
    v = verdict(taped)
    assert 0.5 * DOC["covered_still"] < v.metrics["still"] < DOC["covered_still"]
    assert max(0.5 * DOC["covered_detail"], DOC["smeared_detail"]) < v.metrics["detail"] < DOC["covered_detail"]
    assert raised(v) == ["covered"]


def test_a_view_60_percent_taped_from_below_is_not_covered(bench):
    camera, _, verdict, _ = bench
    base = camera.view.render()
    taped = base.copy()
    taped[91:] = effects.tape(base, np.random.default_rng(1), (40, 60, 170), 1.0)[91:]
    v = verdict(taped)
    assert DOC["covered_still"] < v.metrics["still"] < 2 * DOC["covered_still"]
    assert v.metrics["detail"] < DOC["covered_detail"]
    assert raised(v) == []


def test_a_dark_room_is_not_covered(bench):
    camera, _, verdict, _ = bench
    v = verdict(effects.light(camera.view.render(), 0.3, 0.4))
    assert v.metrics["detail"] < DOC["covered_detail"]  # dim ...
    assert DOC["covered_still"] < v.metrics["still"] < 2 * DOC["covered_still"]  # ... but the same layout
    assert raised(v) == []


def test_a_partly_changed_view_is_not_covered(bench):
    camera, _, verdict, other = bench
    img = camera.view.render()
    img[:, :160] = other[:, :160]
    v = verdict(img)
    assert v.metrics["still"] < DOC["covered_still"]
    assert DOC["covered_detail"] < v.metrics["detail"] < 2 * DOC["covered_detail"]
    assert raised(v) == []


def test_paint_is_covered_and_a_thin_coat_is_only_defocused(bench):
    camera, _, verdict, _ = bench
    base = camera.view.render()
    coat = verdict(effects.spray(base, np.random.default_rng(2), (30, 30, 30), 0.3))
    assert coat.metrics["still"] >= DOC["covered_still"]  # the layout survives: only the paint rule can see it
    assert 0.5 * DOC["smeared_detail"] < coat.metrics["detail"] < DOC["smeared_detail"]
    assert 0.5 * DOC["smeared_texture"] < coat.metrics["texture"] < DOC["smeared_texture"]
    assert 0.5 * DOC["smeared_dim"] < coat.metrics["brightness"] < DOC["smeared_dim"]  # paint darkens
    assert raised(coat) == ["covered"]
    thin = verdict(effects.spray(base, np.random.default_rng(2), (30, 30, 30), 0.2))
    assert DOC["smeared_detail"] < thin.metrics["detail"] < 2 * DOC["smeared_detail"]
    assert thin.metrics["texture"] < DOC["smeared_texture"]
    assert raised(thin) == ["defocused"]


def test_a_strong_blur_keeps_its_brightness_so_it_is_not_paint(bench):
    """The fresh part's first miss: a blur that takes as much structure (and structure per
    brightness) as paint, but keeps the brightness, which paint never does: defocused."""
    camera, _, verdict, _ = bench
    v = verdict(effects.defocus(camera.view.render(), 0.04 * 320))
    assert v.metrics["detail"] < DOC["smeared_detail"] and v.metrics["texture"] < DOC["smeared_texture"]
    assert DOC["smeared_dim"] < v.metrics["brightness"] < 2 * DOC["smeared_dim"]
    assert v.metrics["sharpness"] < DOC["defocus_sharpness"]
    assert raised(v) == ["defocused"]


def test_dim_and_soft_is_defocused_not_covered(bench):
    camera, _, verdict, _ = bench
    v = verdict(effects.defocus(effects.light(camera.view.render(), 0.35, 0.4), 0.006 * 320))
    assert v.metrics["detail"] < DOC["smeared_detail"]
    assert DOC["smeared_texture"] < v.metrics["texture"] < 2 * DOC["smeared_texture"]
    assert 0.5 * DOC["defocus_sharpness"] < v.metrics["sharpness"] < DOC["defocus_sharpness"]
    assert raised(v) == ["defocused"]


def test_a_slightly_soft_lens_is_not_defocused(bench):
    camera, _, verdict, _ = bench
    v = verdict(effects.defocus(camera.view.render(), 0.004 * 320))
    assert DOC["defocus_sharpness"] < v.metrics["sharpness"] < 2 * DOC["defocus_sharpness"]
    assert raised(v) == []


@pytest.mark.parametrize("dx, angle, moved", [
    (0.03, 0.0, False), (0.08, 0.0, True),  # shift tolerance 5 % of the width
    (0.03, 1.5, False),  # both below tolerance
    (0.0, 4.0, True), (0.0, 3.0, True)])  # roll tolerance 2.5 degrees
def test_moved_beyond_the_tolerance_only(bench, dx, angle, moved):
    camera, _, verdict, _ = bench
    v = verdict(camera.view.render(dx, 0.0, angle))
    assert v.motion is not None and v.metrics["still"] < DOC["moved_gate"]  # the motion search ran
    m = v.motion
    assert abs(m.shift - dx) < 0.01 and abs(m.angle - angle) <= 0.75 and m.aligned > DOC["moved_aligned"]
    if dx:
        below, above = 0.5 * DOC["moved_shift"] < m.shift < DOC["moved_shift"], \
            DOC["moved_shift"] < m.shift < 2 * DOC["moved_shift"]
        assert below or above
    if angle and not dx:
        assert DOC["moved_angle"] < abs(m.angle) < 2 * DOC["moved_angle"]
    if dx and angle:
        assert 0.5 * DOC["moved_angle"] < abs(m.angle) < DOC["moved_angle"]
    if angle == 3.0:
        assert 0.5 * DOC["moved_gate"] < v.metrics["still"]  # a small roll is only just below the gate
    assert raised(v) == (["moved"] if moved else [])


def test_a_healthy_view_does_not_run_the_motion_search(bench):
    camera, _, verdict, _ = bench
    v = verdict(camera.view.render())
    assert DOC["moved_gate"] < v.metrics["still"] and v.motion is None and raised(v) == []


@pytest.mark.parametrize("share, moved", [(0.7, False), (0.8, True)])
def test_turned_away_when_none_of_the_fine_structure_is_left(bench, share, moved):
    """Another photo over part of the view: at 80 % nothing of the reference's fine
    structure correlates any more (the camera looks elsewhere), at 70 % it still does."""
    camera, _, verdict, other = bench
    img = camera.view.render()
    img[:, :int(share * 320)] = other[:, :int(share * 320)]
    v = verdict(img)
    assert v.motion is not None and v.motion.aligned < DOC["moved_aligned"]  # no shift or roll explains it
    if moved:
        assert 0.5 * DOC["replaced_structure"] < v.metrics["structure"] < DOC["replaced_structure"]
    else:
        assert DOC["replaced_structure"] < v.metrics["structure"] < 2 * DOC["replaced_structure"]
    assert raised(v) == (["moved"] if moved else [])


def test_a_noisy_camera_whose_noise_drops_is_not_frozen(dataset):
    """Night gain (sensor noise sigma 8), then the lights come on (sigma 0.3): consecutive
    frames differ far less than this camera's normal, yet more than the absolute
    tolerance, so they are live, not frozen."""
    camera = Camera.on(dataset, 7)
    monitor = ViewMonitor(ViewCheckOptions(learn_s=10))
    feed(monitor, [(t, camera.frame(noise=8), []) for t in range(0, 80, 2)])
    normal = monitor._frozen._normal_median  # noqa: SLF001 - the witness of this test
    assert normal * 0.25 > 2 * DOC["frozen_tolerance"]
    out = feed(monitor, [(80 + t, camera.frame(noise=0.3), []) for t in range(0, 120, 2)])
    assert DOC["frozen_tolerance"] < monitor._frozen.last_difference < 2 * DOC["frozen_tolerance"]  # noqa: SLF001
    assert started(out) == []


def test_a_frozen_picture_with_a_live_clock_is_frozen(dataset):
    import cv2
    camera = Camera.on(dataset, 7)
    monitor = ViewMonitor(ViewCheckOptions(learn_s=10))
    t = learned(monitor, camera)
    still = camera.frame()

    def clock(second: int) -> np.ndarray:
        img = still.copy()
        cv2.putText(img, f"2026-03-02 17:{second // 60:02d}:{second % 60:02d}", (4, 232),
                    cv2.FONT_HERSHEY_SIMPLEX, 0.8, (255, 255, 255), 2)
        return img
    assert started(feed(monitor, [(t + i, clock(i), []) for i in range(0, 70, 2)])) == [("frozen", t + 60)]
