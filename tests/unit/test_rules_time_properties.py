"""Properties of schedules, the capture-time policy and the evaluator over extreme datetimes,
every IANA zone (sampled by hypothesis) and DST transition days. Bounded to a few seconds."""

from __future__ import annotations

import datetime as dt
import zoneinfo
from functools import lru_cache

from hypothesis import given, settings
from hypothesis import strategies as st

from app.core.errors import InvalidTimestamp
from app.rules.logic.capture_time import CaptureTimePolicy
from app.rules.site.schema import ActiveWindow
from app.rules.site.loader import parse_site_config
from app.rules.logic.evaluator import CameraRules
from app.rules.logic.schedule import Schedule
from app.core.timeutil import UTC
from tests.support.rules_util import H, W, people

ZONES = sorted(zoneinfo.available_timezones())
zones = st.sampled_from(ZONES)
# any offset datetime accepts (strictly below 24 h), or none at all
offsets = st.one_of(st.none(), st.integers(-(24 * 60 - 1), 24 * 60 - 1).map(
    lambda m: dt.timezone(dt.timedelta(minutes=m))))
extreme = st.one_of(
    st.datetimes(min_value=dt.datetime.min, max_value=dt.datetime.max, timezones=offsets),
    st.sampled_from([dt.datetime.min, dt.datetime.max]).flatmap(
        lambda d: offsets.map(lambda tz: d.replace(tzinfo=tz))),
)
WINDOWS = [ActiveWindow(start=dt.time(22), end=dt.time(6)), ActiveWindow(start=dt.time(2), end=dt.time(3), days=("sun",))]
PROPS = settings(max_examples=60, deadline=None)


@lru_cache(maxsize=None)
def transitions(zone: str, year: int) -> tuple[dt.datetime, ...]:
    """UTC instants (to the hour) at which the zone's offset changes during the year."""
    tz = zoneinfo.ZoneInfo(zone)
    t, end, out = dt.datetime(year, 1, 1, tzinfo=UTC), dt.datetime(year + 1, 1, 1, tzinfo=UTC), []
    prev = t.astimezone(tz).utcoffset()
    while t < end:
        t += dt.timedelta(hours=6)
        off = t.astimezone(tz).utcoffset()
        if off != prev:
            hour = t - dt.timedelta(hours=6)
            while hour.astimezone(tz).utcoffset() == prev:
                hour += dt.timedelta(hours=1)
            out.append(hour)
            prev = off
    return tuple(out)


@st.composite
def dst_edges(draw) -> tuple[str, dt.datetime]:
    """A zone and a time within a day of one of its offset changes (or any time, if it has none)."""
    zone = draw(st.sampled_from([z for z in ("Europe/Berlin", "America/New_York", "Australia/Lord_Howe",
                                             "America/Santiago", "Pacific/Chatham", "Asia/Tehran")]) | zones)
    year = draw(st.integers(1970, 2037))
    edges = transitions(zone, year)
    base = draw(st.sampled_from(edges)) if edges else dt.datetime(year, 6, 1, tzinfo=UTC)
    return zone, base + dt.timedelta(seconds=draw(st.integers(-86_400, 86_400)))


@PROPS
@given(zone=zones, when=extreme)
def test_schedule_never_overflows(zone, when):
    assert Schedule(WINDOWS, zone).active(when) in (True, False)


CORNERS = [d.replace(tzinfo=tz) for d in (dt.datetime.min, dt.datetime.max)
           for tz in (None, UTC, dt.timezone(dt.timedelta(hours=23, minutes=59)),
                      dt.timezone(-dt.timedelta(hours=23, minutes=59)))]


def test_every_zone_at_the_ends_of_the_calendar():
    """Not sampled: each of the ~600 zones, at the very ends of datetime's range, both through
    the schedule and through the policy (whatever it accepts converts to the zone)."""
    policy = CaptureTimePolicy(max_skew_s=86_400, max_age_s=3_650 * 86_400)  # the widest settings allow
    for zone in ZONES:
        schedule, tz = Schedule(WINDOWS, zone), zoneinfo.ZoneInfo(zone)
        for when in CORNERS:
            assert schedule.active(when) in (True, False)
            for now in (dt.datetime(1, 1, 2, tzinfo=UTC), dt.datetime(9999, 12, 30, tzinfo=UTC)):
                try:
                    policy.check(when, now=now).astimezone(tz)
                except InvalidTimestamp:
                    pass


@PROPS
@given(edge=dst_edges())
def test_schedule_on_dst_days_matches_wall_clock(edge):
    zone, when = edge
    local = when.astimezone(zoneinfo.ZoneInfo(zone))
    expected = local.hour >= 22 or local.hour < 6
    assert Schedule(WINDOWS[:1], zone).active(when) is expected


@PROPS
@given(when=extreme, now=st.datetimes(min_value=dt.datetime(1971, 1, 1), max_value=dt.datetime(2200, 1, 1),
                                      timezones=st.just(UTC)), zone=zones)
def test_policy_refuses_or_accepts_a_time_convertible_everywhere(when, now, zone):
    policy = CaptureTimePolicy(max_skew_s=300, max_age_s=86_400)
    try:
        got = policy.check(when, now=now)
    except InvalidTimestamp as exc:
        assert exc.reason in ("future", "past")
        return
    assert now - dt.timedelta(days=1) <= got <= now + dt.timedelta(seconds=300)
    got.astimezone(zoneinfo.ZoneInfo(zone))  # cannot overflow


def camera(zone: str) -> CameraRules:
    cfg = parse_site_config({"timezone": zone, "cameras": [{"id": "cam", "zones": [
        {"name": "z", "polygon": [[0, 0], [1, 0], [1, 1], [0, 1]], "rules": [
            {"type": "crowd", "min_count": 2, "min_duration_s": 10, "clear_after_s": 2, "cooldown_s": 5,
             "active_hours": [{"start": "22:00", "end": "06:00"}]},
            {"type": "intrusion", "clear_after_s": 1, "cooldown_s": 0}]}]}]})
    return CameraRules(cfg.cameras[0], cfg)


@settings(max_examples=30, deadline=None)  # each example builds a ByteTrack tracker
@given(zone=zones, frames=st.lists(st.tuples(extreme, st.integers(0, 3)), min_size=1, max_size=12))
def test_evaluator_survives_extreme_times(zone, frames):
    cam = camera(zone)
    events = []
    for when, n in frames:
        events += [tr.event for tr in cam.evaluate(when, (W, H), people(n))]
    events += [tr.event for tr in cam.close_all()]
    for ev in events:
        assert ev.ended_at is None or ev.ended_at >= ev.started_at
        ev.to_dict()


@PROPS
@given(edge=dst_edges(), steps=st.lists(st.tuples(st.integers(0, 3600), st.integers(0, 3)), min_size=1, max_size=15))
def test_evaluator_across_dst_changes(edge, steps):
    zone, when = edge
    cam = camera(zone)
    open_ids: set[str] = set()
    for gap, n in steps:
        when += dt.timedelta(seconds=gap)
        for tr in cam.evaluate(when, (W, H), people(n)):
            if tr.kind == "started":
                assert tr.event.id not in open_ids
                open_ids.add(tr.event.id)
            else:
                assert tr.event.ended_at >= tr.event.started_at
                open_ids.remove(tr.event.id)
