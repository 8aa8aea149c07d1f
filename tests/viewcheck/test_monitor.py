"""ViewMonitor mechanics on a real photo: persistence, the veto of a large object near the
lens, a resolution change, the operator's accept, light modes, and cameras that post
rarely. Learning is shortened (learn_s=10) so each test needs only a few dozen frames."""

from __future__ import annotations

import numpy as np
import pytest

from app.rules.logic.view import ViewCheckError, ViewCheckOptions, ViewMonitor
from app.tooling.viewcheck import effects
from tests.support.viewcheck import Camera, at, feed, learned, started, tape

FAST = ViewCheckOptions(learn_s=10)


@pytest.fixture
def camera(dataset) -> Camera:
    return Camera.on(dataset, 3)


def test_nothing_is_judged_before_the_reference_is_learned(camera):
    monitor = ViewMonitor(FAST)
    assert feed(monitor, [(t, camera.frame(tape), []) for t in range(0, 8, 2)]) == []
    state = monitor.state()
    assert {k: s.status for k, s in state.checks.items()} == {
        "blinded": "learning", "covered": "learning", "moved": "learning", "defocused": "learning",
        "frozen": "learning"}
    assert state.learning < 1.0 and state.learned == {"day": None, "night": None}


@pytest.mark.parametrize("cover_s, alarm", [(6, False), (8, False), (14, True)])
def test_a_change_must_persist_for_persist_s(camera, cover_s, alarm):
    monitor = ViewMonitor(FAST)
    t = learned(monitor, camera)
    frames = [(t + i, camera.frame(tape), []) for i in range(0, cover_s + 1, 2)]
    frames += [(t + cover_s + 2 + i, camera.frame(), []) for i in range(0, 30, 2)]
    got = started(feed(monitor, frames))
    assert got == ([("covered", t + 10)] if alarm else [])


def test_an_interrupted_change_starts_its_persistence_again(camera):
    monitor = ViewMonitor(FAST)
    t = learned(monitor, camera)
    frames = [(t + i, camera.frame(tape if i != 8 else None), []) for i in range(0, 16, 2)]
    assert started(feed(monitor, frames)) == []  # covered 0..6, clear at 8, covered 10..14: never 10 s in a row
    assert monitor.state().checks["covered"].pending_since == at(t + 10)


def test_a_large_object_near_the_lens_vetoes_covered(camera):
    """The same covered frames: with the detector's large box nothing starts; the box gone,
    the evidence starts afresh and the problem starts persist_s later."""
    monitor = ViewMonitor(FAST)
    t = learned(monitor, camera)
    big = [(0.05, 0.0, 0.95, 1.0, 0.8)]
    assert feed(monitor, [(t + i, camera.frame(tape), big) for i in range(0, 30, 2)]) == []
    assert monitor.state().checks["covered"].pending_since is None
    got = started(feed(monitor, [(t + 30 + i, camera.frame(tape), []) for i in range(0, 14, 2)]))
    assert got == [("covered", t + 40)]


@pytest.mark.parametrize("box", [(0.4, 0.4, 0.6, 0.6, 0.9),  # small: 4 % of the frame
                                 (0.0, 0.0, 1.0, 1.0, 0.1)])  # large but not confident
def test_a_small_or_unsure_box_does_not_veto(camera, box):
    monitor = ViewMonitor(FAST)
    t = learned(monitor, camera)
    got = started(feed(monitor, [(t + i, camera.frame(tape), [box]) for i in range(0, 14, 2)]))
    assert got == [("covered", t + 10)]


def test_moved_is_vetoed_too_and_raised_without_the_box(camera):
    monitor = ViewMonitor(FAST)
    t = learned(monitor, camera)
    big = [(0.0, 0.2, 0.7, 1.0, 0.9)]
    assert feed(monitor, [(t + i, camera.frame(dx=0.2), big) for i in range(0, 20, 2)]) == []
    got = started(feed(monitor, [(t + 20 + i, camera.frame(dx=0.2), []) for i in range(0, 14, 2)]))
    assert got == [("moved", t + 30)]


def test_a_new_resolution_relearns_instead_of_alarming(dataset, camera):
    monitor = ViewMonitor(FAST)
    t = learned(monitor, camera)
    covered = feed(monitor, [(t + i, camera.frame(tape), []) for i in range(0, 12, 2)])
    assert started(covered) == [("covered", t + 10)]
    big = Camera.on(dataset, 3, size=(640, 480), seed=5)
    out = feed(monitor, [(t + 12, big.frame(), [])])
    assert [(tr.kind, tr.state, tr.reason) for tr in out] == [("covered", "ended", "relearning")]
    state = monitor.state()
    assert state.frame_size == (640, 480) and state.learned["day"] is None
    assert state.checks["covered"].status == "learning"
    # the new size is learned, and the same view at 640 px raises nothing
    assert feed(monitor, [(t + 14 + i, big.frame(), []) for i in range(0, 40, 2)]) == []
    assert monitor.state().learned["day"] is not None


def test_accept_makes_the_current_view_the_reference(camera):
    monitor = ViewMonitor(FAST)
    t = learned(monitor, camera)
    got = feed(monitor, [(t + i, camera.frame(dx=0.25), []) for i in range(0, 12, 2)])
    assert started(got) == [("moved", t + 10)]
    ended = monitor.accept()
    assert [(tr.kind, tr.state, tr.reason, tr.at) for tr in ended] == [("moved", "ended", "accepted", at(t + 10))]
    assert monitor.state().checks["moved"].status == "ok"
    assert monitor.state().learned == {"day": at(t + 10), "night": None}
    # the moved view is the view now: no alarm; going back to the old view is a move
    assert feed(monitor, [(t + 12 + i, camera.frame(dx=0.25), []) for i in range(0, 30, 2)]) == []
    back = feed(monitor, [(t + 42 + i, camera.frame(), []) for i in range(0, 12, 2)])
    assert started(back) == [("moved", t + 52)]


def test_accept_needs_a_checked_frame():
    with pytest.raises(ViewCheckError, match="no frame"):
        ViewMonitor().accept()


def test_night_has_its_own_reference(camera):
    """Grey (IR) frames switch to the night mode, which learns its own reference while
    covered is still judged against the day reference; back in colour, no relearning."""
    monitor = ViewMonitor(FAST)
    t = learned(monitor, camera)
    ir = lambda img: effects.infrared(img, 1.2)  # noqa: E731
    assert feed(monitor, [(t + i, camera.frame(ir), []) for i in range(0, 30, 2)]) == []
    state = monitor.state()
    assert state.mode == "night" and state.learned["night"] is not None
    assert feed(monitor, [(t + 30 + i, camera.frame(), []) for i in range(0, 10, 2)]) == []
    assert monitor.state().mode == "day"
    taped_at_night = feed(monitor, [(t + 40 + i, camera.frame(lambda img: tape(ir(img))), [])
                                    for i in range(0, 12, 2)])
    assert started(taped_at_night) == [("covered", t + 50)]


def test_tape_before_the_night_reference_is_learned_is_judged_against_the_day(camera):
    monitor = ViewMonitor(FAST)
    t = learned(monitor, camera)
    grey_tape = lambda img: effects.tape(img, np.random.default_rng(2), (120, 120, 120), 1.0)  # noqa: E731
    got = feed(monitor, [(t + i, camera.frame(grey_tape, noise=0.5), []) for i in range(0, 30, 2)])
    assert monitor.state().mode == "night" and monitor.state().learned["night"] is None  # never learned from tape
    assert started(got) == [("covered", t + 10)]


def test_frames_rarer_than_max_gap_never_build_evidence(camera):
    monitor = ViewMonitor(FAST)
    t = learned(monitor, camera)
    assert feed(monitor, [(t + i, camera.frame(tape), []) for i in range(0, 900, 90)]) == []
    state = monitor.state()
    assert state.sparse and state.checks["covered"].pending_since == at(t + 810)
    # at one frame a minute (max_gap_s 60) the same tape is a problem after 3 frames
    got = feed(monitor, [(t + 900 + i, camera.frame(tape), []) for i in range(0, 300, 60)])
    assert started(got) == [("covered", t + 1020)] and not monitor.state().sparse


def test_disabled_monitor_ignores_frames_and_says_off(camera):
    monitor = ViewMonitor(ViewCheckOptions(enabled=False))
    assert feed(monitor, [(t, camera.frame(tape), []) for t in range(0, 60, 2)]) == []
    assert {s.status for s in monitor.state().checks.values()} == {"off"}


def test_reconfigure_ends_the_problems_of_a_check_switched_off(camera):
    monitor = ViewMonitor(FAST)
    t = learned(monitor, camera)
    assert started(feed(monitor, [(t + i, camera.frame(tape), []) for i in range(0, 12, 2)])) == [("covered", t + 10)]
    out = monitor.reconfigure(ViewCheckOptions(learn_s=10, checks=["moved", "frozen"]), at(t + 12))
    assert [(tr.kind, tr.reason) for tr in out] == [("covered", "disabled")]
    assert monitor.state().checks["covered"].status == "off"
    assert monitor.state().learned["day"] is not None  # the reference survives a reload


def test_a_flat_picture_is_never_learned_nor_judged_against(camera):
    """A black picture (a camera booting, a lens cap, a dark corner at night) has no
    structure to lose: it is not learned as the reference (the monitor learns on, and says
    why), nothing is raised while it lasts, and the scene that follows is learned. An
    operator who accepts a black view gets blinded checked only, never "covered"."""
    monitor = ViewMonitor(FAST)
    rng = np.random.default_rng(7)

    def noisy_black() -> np.ndarray:
        return np.clip(rng.normal(3, 1.5, (240, 320, 3)), 0, 255).astype(np.uint8)

    assert feed(monitor, [(t, noisy_black(), []) for t in range(0, 40, 2)]) == []
    state = monitor.state()
    assert state.learned["night"] is None and state.checks["covered"].status == "learning"
    assert "no structure" in state.checks["covered"].note
    assert feed(monitor, [(40 + t, camera.frame(), []) for t in range(0, 30, 2)]) == []
    assert monitor.state().learned["day"] is not None and monitor.state().checks["covered"].note is None

    accepting = ViewMonitor(FAST)
    feed(accepting, [(0, noisy_black(), [])])
    accepting.accept()
    assert accepting.state().checks["covered"].status == "suspended"
    assert accepting.state().checks["blinded"].status == "ok"
    assert feed(accepting, [(2 + t, noisy_black(), []) for t in range(0, 30, 2)]) == []
