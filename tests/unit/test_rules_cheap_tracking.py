"""tracker.skip_when_unneeded: cameras whose rules need no identity skip ByteTrack and raise
exactly the events of the full path on the same frames (only track ids differ: none); cameras
with an identity rule are tracked as before."""

from __future__ import annotations

import pytest

from app.rules.logic.evaluator import CameraRules
from app.rules.site.loader import parse_site_config
from tests.support.rules_util import H, W, at, det

ZONE = [[0.0, 0.3], [1.0, 0.3], [1.0, 1.0], [0.0, 1.0]]
COUNTING = [{"type": "intrusion", "classes": ["person"], "clear_after_s": 2, "cooldown_s": 5},
            {"type": "crowd", "classes": ["person", "car"], "min_count": 3, "min_duration_s": 3, "clear_after_s": 2}]


def camera(rules: list[dict], skip: bool) -> CameraRules:
    cfg = parse_site_config({"tracker": {"skip_when_unneeded": skip},
                             "cameras": [{"id": "cam", "zones": [{"name": "yard", "polygon": ZONE, "rules": rules}]}]})
    return CameraRules(cfg.cameras[0], cfg)


def scene(t: int) -> list:
    """People and a car moving through the zone and out of it; empty spells so events end."""
    if t % 20 >= 14:
        return []
    people = [det("person", (0.02 * t + 0.25 * k) % 1.0, 0.25 + 0.15 * k) for k in range(1 + t % 4)]
    return people + ([det("car", 0.5, 0.9, w=0.2, h=0.15)] if t % 7 < 3 else [])


def events(cam: CameraRules, frames: int = 80, keep_tracks: bool = True) -> list[tuple]:
    out = []
    for t in range(frames):
        for tr in cam.evaluate(at(t), (W, H), scene(t)):
            ev = tr.apply()
            objects = [(o["class_name"], o["box"], o["track_id"] if keep_tracks else "-") for o in ev.objects]
            out.append((tr.kind, ev.zone, ev.rule, ev.started_at, ev.ended_at, ev.max_count, objects))
        out.append(("counts", dict(cam.zone_counts)))
    return out


def test_counting_rules_raise_the_same_events_without_tracking():
    full, cheap = camera(COUNTING, skip=False), camera(COUNTING, skip=True)
    got_full, got_cheap = events(full, keep_tracks=False), events(cheap, keep_tracks=False)
    assert {e[0] for e in got_full} == {"started", "ended", "counts"}  # the scene starts and ends events
    assert got_cheap == got_full
    assert not cheap.tracked and cheap._tracker is None  # ByteTrack never even built
    assert full.tracked
    assert any(o[2] is not None for o in track_ids(camera(COUNTING, skip=False)))  # the full path has ids
    assert all(o[2] is None for o in track_ids(camera(COUNTING, skip=True)))  # the cheap one none


def track_ids(cam: CameraRules) -> list[tuple]:
    return [o for e in events(cam) if e[0] != "counts" for o in e[6]]


@pytest.mark.parametrize("identity", [
    {"type": "line_crossing", "line": [[0.5, 0.3], [0.5, 1.0]], "classes": ["person"]},
    {"type": "loitering", "classes": ["person"], "min_duration_s": 4},
    {"type": "intrusion", "name": "steady", "classes": ["person"], "min_frames": 2}])
def test_a_camera_with_an_identity_rule_is_tracked_as_before(identity):
    full, cheap = camera(COUNTING + [identity], skip=False), camera(COUNTING + [identity], skip=True)
    assert cheap.tracked
    got_full, got_cheap = events(full, keep_tracks=False), events(cheap, keep_tracks=False)
    assert got_cheap == got_full
    assert any(o[2] is not None for o in track_ids(camera(COUNTING + [identity], skip=True)))
