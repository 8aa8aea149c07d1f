"""Time comes from the caller (capture time), never the clock; the frozen check and what a
noiseless static scene does to it."""

from __future__ import annotations

import ast
import datetime as dt
from pathlib import Path

import numpy as np
import pytest

import app.rules.logic.view as view_package
from app.rules.logic.view import ViewCheckError, ViewCheckOptions, ViewMonitor
from tests.support.viewcheck import Camera, T0, at, feed, learned, started, tape

FAST = ViewCheckOptions(learn_s=10)
LOGIC = ("checks", "features", "frozen", "monitor", "motion", "persistence", "reference", "render", "state")


@pytest.fixture
def camera(dataset) -> Camera:
    return Camera.on(dataset, 7)


def covered_run(camera: Camera, base: dt.datetime) -> list[tuple[str, str, float]]:
    monitor = ViewMonitor(FAST)
    out = []
    for i in range(40):
        frame = camera.frame(tape if 20 <= i < 30 else None)
        for tr in monitor.observe(base + dt.timedelta(seconds=2 * i), frame):
            out.append((tr.kind, tr.state, (tr.at - base).total_seconds()))
    return out


def test_a_replayed_day_gives_the_same_answers_at_any_date(camera):
    first = covered_run(camera, dt.datetime(2001, 1, 1, tzinfo=dt.timezone.utc))
    again = covered_run(camera,
                        dt.datetime(2030, 6, 1, 23, 59, tzinfo=dt.timezone(dt.timedelta(hours=-7))))
    assert first == again == [("covered", "started", 50.0), ("covered", "ended", 70.0)]


def test_a_burst_is_judged_on_capture_time_not_on_arrival(camera):
    """A gateway's burst: 300 frames posted back to back, 0.5 s of capture time apart; the
    monitor checks every interval_s of capture time and the problem starts at the
    capture time persist_s after the cover, whatever the wall clock did meanwhile."""
    monitor = ViewMonitor(FAST)
    frames = [camera.frame(), camera.frame(tape)]
    checks = 0
    out = []
    for i in range(300):
        before = monitor.last_check
        out += monitor.observe(at(i * 0.5), frames[i * 0.5 >= 100])
        checks += monitor.last_check != before
    assert checks == 75  # one per interval_s (2 s) of capture time
    assert started(out) == [("covered", 110.0)]


def test_naive_or_missing_time_is_refused(camera):
    monitor = ViewMonitor()
    with pytest.raises(ViewCheckError, match="timezone-aware"):
        monitor.observe(dt.datetime(2026, 1, 1), camera.frame())
    with pytest.raises(ViewCheckError, match="timezone-aware"):
        monitor.observe(1767225600.0, camera.frame())  # type: ignore[arg-type]


def test_bad_frames_and_boxes_are_refused():
    monitor = ViewMonitor()
    for frame in ("not an array", None, np.zeros((100, 100, 4), np.uint8), np.zeros((100, 100), np.float32),
                  np.zeros((8, 8), np.uint8)):
        with pytest.raises(ViewCheckError):
            monitor.observe(T0, frame)
    with pytest.raises(ViewCheckError, match="box"):
        monitor.observe(T0, np.zeros((100, 100, 3), np.uint8), [(0.1, 0.2, 0.3)])
    with pytest.raises(ViewCheckError, match="box"):
        monitor.observe(T0, np.zeros((100, 100, 3), np.uint8), [(0.1, 0.2, 0.3, float("nan"))])
    assert monitor.last_check is None  # nothing was judged


def test_the_clock_going_back_restarts_the_evidence_not_the_reference(camera):
    monitor = ViewMonitor(FAST)
    t = learned(monitor, camera)
    feed(monitor, [(t + i, camera.frame(tape), []) for i in range(0, 8, 2)])
    assert monitor.state().checks["covered"].pending_since == at(t)
    assert feed(monitor, [(t + 7, camera.frame(tape), [])]) == []  # out of order within a burst: skipped
    assert monitor.last_check == at(t + 6)
    back = t - 3600  # the replay started again an hour earlier
    got = started(feed(monitor, [(back + i, camera.frame(tape), []) for i in range(0, 12, 2)]))
    assert got == [("covered", back + 10)] and monitor.state().learned["day"] is not None


LOGIC_DIR = Path(view_package.__file__).parent  # never a path relative to the working directory
OPTIONS = LOGIC_DIR.parents[1] / "site" / "viewchecks.py"  # the options live with the site file's schema


def test_the_logic_never_reads_a_clock():
    calls = {"now", "utcnow", "today", "time", "monotonic", "perf_counter", "time_ns"}
    for path in [LOGIC_DIR / f"{name}.py" for name in LOGIC] + [OPTIONS]:
        name = path.stem
        tree = ast.parse(path.read_text())
        used = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in calls}
        imports = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "time"
                   for a in n.names} | {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        assert not used and "time" not in imports, f"{name}.py reads a clock: {used or imports}"


def test_a_frozen_picture_is_raised_after_frozen_after_s(camera):
    monitor = ViewMonitor(FAST)
    t = learned(monitor, camera)
    still = camera.frame()
    out = feed(monitor, [(t + i, still.copy(), []) for i in range(0, 80, 2)])
    assert started(out) == [("frozen", t + 60)]
    (tr,) = out
    assert tr.since == at(t)  # the first of the identical frames
    ended = feed(monitor, [(t + 80 + i, camera.frame(), []) for i in range(0, 14, 2)])
    assert [(e.kind, e.state, e.reason) for e in ended] == [("frozen", "ended", "healthy")]


def test_a_live_quiet_scene_is_not_frozen(camera):
    """Nothing moves, but the sensor is noisy (sigma 1.5): never identical, never frozen."""
    monitor = ViewMonitor(FAST)
    assert feed(monitor, [(i, camera.frame(noise=1.5), []) for i in range(0, 300, 2)]) == []
    assert monitor.state().checks["frozen"].status == "ok"


def test_a_noiseless_static_scene_suspends_the_frozen_check(camera):
    """A noiseless encoder watching an empty scene sends identical frames: that is
    indistinguishable from a frozen picture, so the check says "suspended" instead of
    alarming, and resumes when frames start to differ."""
    monitor = ViewMonitor(FAST)
    static = camera.frame(noise=0)
    assert feed(monitor, [(i, static.copy(), []) for i in range(0, 300, 2)]) == []
    frozen = monitor.state().checks["frozen"]
    assert frozen.status == "suspended" and "static scene" in frozen.note
    assert feed(monitor, [(300 + i, camera.frame(noise=2), []) for i in range(0, 80, 2)]) == []
    assert monitor.state().checks["frozen"].status == "ok"
    # and now a real freeze of that camera is seen
    still = camera.frame(noise=2)
    assert started(feed(monitor, [(380 + i, still, []) for i in range(0, 70, 2)])) == [("frozen", 440.0)]
