"""Loitering and line crossing on synthetic tracks (direction, cooldown, jitter),
the per-rule filters (exclude masks, box ratio, max_area, min_frames) and their validation."""

from __future__ import annotations

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from app.rules.site.loader import SiteConfigError, parse_site_config
from app.rules.logic.counts import CrossingCounts
from app.rules.logic.evaluator import CameraRules
from app.rules.logic.geometry import Polyline
from tests.support.rules_util import H, W, at, det

FULL = [[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]]
DOOR = [[0.3, 0.5], [0.7, 0.5], [0.7, 0.9], [0.3, 0.9]]
LINE = [[0.0, 0.5], [1.0, 0.5]]  # horizontal, drawn left to right: "in" is downwards (towards the camera)


def camera(*rules: dict, polygon=None) -> CameraRules:
    cfg = parse_site_config({"cameras": [{"id": "cam", "zones": [
        {"name": "zone", "polygon": polygon or FULL, "rules": list(rules)}]}]})
    return CameraRules(cfg.cameras[0], cfg)


def run(cam: CameraRules, frames) -> list[tuple[float, str, dict]]:
    out = []
    for t, dets in frames:
        for tr in cam.evaluate(at(t), (W, H), dets):
            out.append((t, tr.kind, tr.apply().to_dict()))
    return out


def kinds(got) -> list[tuple[float, str]]:
    return [(t, k) for t, k, _ in got]


# --- loitering -------------------------------------------------------------------------------

def loiter(**kw) -> CameraRules:
    return camera({"type": "loitering", "min_duration_s": 10, "clear_after_s": 2, "cooldown_s": 60, **kw},
                  polygon=DOOR)


def test_loitering_person_who_stays_then_leaves():
    cam = loiter()
    got = run(cam, [(t, [det("person", 0.5, 0.7)]) for t in range(0, 15)] + [(t, []) for t in range(15, 20)])
    assert kinds(got) == [(10, "started"), (17, "ended")]
    ev = got[0][2]
    assert ev["rule_type"] == "loitering" and ev["objects"][0]["class_name"] == "person"
    assert ev["ended_at"] is None and got[1][2]["ended_at"] == "2026-03-02T12:00:15Z"


def test_loitering_passer_by_and_short_gaps():
    # walks through the door zone in 4 s: nothing
    assert run(loiter(), [(t, [det("person", 0.2 + 0.1 * t, 0.7)]) for t in range(0, 8)]) == []
    # missed on one frame (shorter than clear_after_s): the same stay goes on
    frames = [(t, [det("person", 0.5, 0.7)] if t != 5 else []) for t in range(0, 11)]
    assert kinds(run(loiter(), frames)) == [(10, "started")]
    # gone for longer than clear_after_s: the stay starts over
    frames = [(t, [det("person", 0.5, 0.7)] if not 4 <= t <= 7 else []) for t in range(0, 16)]
    assert kinds(run(loiter(), frames)) == []


def test_loitering_defaults_to_people_only():
    assert run(loiter(), [(t, [det("car", 0.5, 0.7, w=0.2, h=0.15)]) for t in range(0, 15)]) == []


def test_fire_lane_and_loitering_share_one_dwell_implementation():
    fire = camera({"type": "fire_lane", "min_duration_s": 5}).zones[0].rules[0]
    loit = camera({"type": "loitering", "min_duration_s": 5}).zones[0].rules[0]
    assert type(fire.dwell) is type(loit.dwell) and fire.state.min_duration_s == loit.state.min_duration_s == 0


# --- line crossing ---------------------------------------------------------------------------

def test_polyline_sides_and_segments():
    line = Polyline([[0.2, 0.2], [0.5, 0.5], [0.8, 0.2]])  # a V
    assert line.crossing((0.5, 0.4), (0.5, 0.6)) == "in"   # down through the vertex region
    assert line.crossing((0.3, 0.4), (0.3, 0.2)) == "out"  # up through the first segment... right to left
    assert line.crossing((0.1, 0.1), (0.15, 0.9)) is None   # passes beside the line
    assert line.crossing((0.5, 0.5), (0.5, 0.6)) is None    # starts on the line: not a crossing


def walk(y0: float, y1: float, n: int, x: float = 0.5, t0: float = 0.0):
    """A person's foot point going from y0 to y1 in n one-second steps (small enough for ByteTrack)."""
    return [(t0 + i, [det("person", x, y0 + (y1 - y0) * i / (n - 1))]) for i in range(n)]


def test_line_crossing_counts_each_direction_once():
    cam = camera({"type": "line_crossing", "line": LINE})
    got = run(cam, walk(0.3, 0.7, 9) + [(t, []) for t in range(9, 14)]
              + walk(0.7, 0.3, 9, x=0.3, t0=14))
    started = [e for _, k, e in got if k == "started"]
    assert [e["objects"][0]["direction"] for e in started] == ["in", "out"]
    # the foot point is exactly on the line at t=4 and t=18: counted on the frame after
    assert kinds(got) == [(5, "started"), (5, "ended"), (19, "started"), (19, "ended")]
    assert got[1][2]["ended_at"] == got[1][2]["started_at"] == "2026-03-02T12:00:05Z"
    assert started[0]["rule_type"] == "line_crossing" and started[0]["max_count"] == 1


def test_line_crossing_direction_filter():
    frames = walk(0.3, 0.7, 9) + walk(0.7, 0.3, 9, x=0.3, t0=20)
    only_in = run(camera({"type": "line_crossing", "line": LINE, "direction": "in"}), frames)
    only_out = run(camera({"type": "line_crossing", "line": LINE, "direction": "out"}), frames)
    assert [e["objects"][0]["direction"] for _, k, e in only_in if k == "started"] == ["in"]
    assert [e["objects"][0]["direction"] for _, k, e in only_out if k == "started"] == ["out"]


def test_jitter_on_the_line_counts_once_per_cooldown():
    cam = camera({"type": "line_crossing", "line": LINE, "cooldown_s": 10})
    ys = [0.48, 0.52] * 5  # a box dithering across the line every frame for 10 s
    got = run(cam, [(t, [det("person", 0.5, y)]) for t, y in enumerate(ys)])
    assert kinds(got) == [(1, "started"), (1, "ended")]
    # standing exactly on the line never crosses it
    assert run(camera({"type": "line_crossing", "line": LINE}),
               [(t, [det("person", 0.5, 0.5)]) for t in range(6)]) == []


def test_line_crossing_off_the_line_end_and_untracked():
    short = [[0.0, 0.5], [0.4, 0.5]]
    assert run(camera({"type": "line_crossing", "line": short}), walk(0.3, 0.7, 9, x=0.7)) == []
    # a track lost for longer than clear_after_s draws no path across the line
    frames = walk(0.2, 0.3, 2) + [(t, []) for t in range(2, 8)] + [(8, [det("person", 0.5, 0.8)]),
                                                                    (9, [det("person", 0.5, 0.85)])]
    assert run(camera({"type": "line_crossing", "line": LINE, "clear_after_s": 1}), frames) == []


# --- filters ---------------------------------------------------------------------------------

def intrusion(**kw) -> CameraRules:
    return camera({"type": "intrusion", "clear_after_s": 1, **kw})


def test_exclude_mask_ignores_objects_whose_feet_are_in_it():
    mask = [[0.0, 0.0], [0.5, 0.0], [0.5, 1.0], [0.0, 1.0]]
    assert run(intrusion(exclude=[mask]), [(t, [det("person", 0.25, 0.8)]) for t in range(3)]) == []
    assert kinds(run(intrusion(exclude=[mask]), [(0, [det("person", 0.75, 0.8)])])) == [(0, "started")]


def test_ratio_filters():
    flag = [det("person", 0.5, 0.8, w=0.2, h=0.05)]      # wide and flat: ratio 4
    person = [det("person", 0.5, 0.8, w=0.04, h=0.12)]   # ratio 0.33
    assert run(intrusion(max_ratio=1.0), [(0, flag)]) == []
    assert kinds(run(intrusion(max_ratio=1.0), [(0, person)])) == [(0, "started")]
    assert run(intrusion(min_ratio=1.0), [(0, person)]) == []
    assert kinds(run(intrusion(min_ratio=1.0), [(0, flag)])) == [(0, "started")]


def test_max_area_filter():
    huge = [det("person", 0.5, 0.9, w=0.6, h=0.8)]  # 0.48 of the frame: a reflection, a lens smudge
    assert run(intrusion(max_area=0.2), [(0, huge)]) == []
    assert kinds(run(intrusion(max_area=0.5), [(0, huge)])) == [(0, "started")]


def test_min_frames_needs_consecutive_frames():
    p = [det("person", 0.5, 0.8)]
    assert kinds(run(intrusion(min_frames=3), [(t, p) for t in range(5)])) == [(2, "started")]
    # seen, missed, seen, missed: never three in a row
    assert run(intrusion(min_frames=3), [(t, p if t % 2 == 0 else []) for t in range(8)]) == []


def test_filters_apply_to_line_crossing():
    mask = [[0.0, 0.0], [0.5, 0.0], [0.5, 1.0], [0.0, 1.0]]
    cam = camera({"type": "line_crossing", "line": LINE, "exclude": [mask]})
    assert run(cam, walk(0.3, 0.7, 9, x=0.25)) == []


# --- validation ------------------------------------------------------------------------------

@pytest.mark.parametrize("rule, fragment", [
    ({"type": "line_crossing", "line": [[0.1, 0.5]]}, "a line needs at least 2 points, got 1"),
    ({"type": "line_crossing", "line": [[0.1, 0.5], [1.5, 0.5]]}, "points [1] are outside 0..1"),
    ({"type": "line_crossing", "line": [[0.1, 0.5], [0.1, 0.5]]}, "repeats a point"),
    ({"type": "line_crossing", "line": LINE, "direction": "up"}, "direction: Input should be 'in', 'out' or 'both'"),
    ({"type": "line_crossing"}, "rules[0].line: Field required"),
    ({"type": "loitering"}, "rules[0].min_duration_s: Field required"),
    ({"type": "intrusion", "exclude": [[[0, 0], [1, 1]]]}, "exclude[0]: a polygon needs at least 3 points"),
    ({"type": "intrusion", "min_ratio": 2, "max_ratio": 1}, "min_ratio 2.0 is above max_ratio 1.0"),
    ({"type": "intrusion", "min_area": 0.5, "max_area": 0.1}, "min_area 0.5 is above max_area 0.1"),
    ({"type": "intrusion", "min_frames": 0}, "min_frames: Input should be greater than or equal to 1"),
])
def test_invalid_rules_are_listed_clearly(rule, fragment):
    with pytest.raises(SiteConfigError) as info:
        camera(rule)
    assert any(fragment in e for e in info.value.errors), info.value.errors
    assert all(e.startswith("cameras[0].zones[0].rules[0]") for e in info.value.errors), info.value.errors


# --- properties and the counts store ---------------------------------------------------------

coord = st.floats(0.0, 1.0, allow_nan=False).map(lambda v: round(v, 4))  # normalized pixel positions


@settings(max_examples=300, deadline=None)
@given(st.tuples(coord, coord), st.tuples(coord, coord), st.tuples(coord, coord), st.tuples(coord, coord))
def test_reversed_path_or_line_gives_the_opposite_direction(a, b, p, q):
    assume(a != b)
    way = Polyline([a, b]).crossing(p, q)
    flip = {"in": "out", "out": "in", None: None}
    assert Polyline([a, b]).crossing(q, p) == flip[way]
    assert Polyline([b, a]).crossing(p, q) == flip[way]


def test_crossing_counts_since_and_bound():
    counts = CrossingCounts(max_per_camera=3)
    for s, way in enumerate(["in", "out", "in", "in"]):
        counts.add("cam", at(s), "z/line", way, "person")
    got, dropped = counts.since("cam", None)
    assert got == {("z/line", "in", "person"): 2, ("z/line", "out", "person"): 1} and dropped == at(0)
    assert counts.since("cam", at(2))[0] == {("z/line", "in", "person"): 2}
    assert counts.since("other", None) == ({}, None)
