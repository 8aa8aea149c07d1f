"""Foot points in (concave) polygons, and active hours across midnight and time zones."""

from __future__ import annotations

import datetime as dt
from zoneinfo import ZoneInfo

import pytest

from app.rules.site.schema import ActiveWindow
from app.rules.logic.geometry import Polygon, box_area_fraction, foot_point
from app.rules.logic.schedule import Schedule

# A "U": the notch between the arms (x 0.4..0.6, y 0..0.6) is outside.
U_SHAPE = [(0.1, 0.0), (0.4, 0.0), (0.4, 0.6), (0.6, 0.6), (0.6, 0.0), (0.9, 0.0), (0.9, 1.0), (0.1, 1.0)]


def test_foot_point_is_bottom_centre_normalized():
    assert foot_point(100, 50, 300, 450, 1000, 500) == (0.2, 0.9)
    assert box_area_fraction(0, 0, 100, 50, 1000, 500) == pytest.approx(0.01)


@pytest.mark.parametrize("point, inside", [
    ((0.5, 0.5), True), ((0.05, 0.5), False), ((0.95, 0.5), False), ((0.5, 1.2), False),
    ((0.1, 0.5), True),   # on the border counts as inside
])
def test_convex(point, inside):
    assert Polygon([(0.1, 0.1), (0.9, 0.1), (0.9, 1.0), (0.1, 1.0)]).contains(*point) is inside


@pytest.mark.parametrize("point, inside", [
    ((0.2, 0.3), True),   # left arm
    ((0.8, 0.3), True),   # right arm
    ((0.5, 0.3), False),  # in the notch: inside the bounding box, outside the polygon
    ((0.5, 0.8), True),   # the base below the notch
    ((0.5, 0.59), False),
    ((0.05, 0.5), False),
])
def test_concave(point, inside):
    assert Polygon(U_SHAPE).contains(*point) is inside


def test_pixels_for_drawing():
    pts = Polygon([(0, 0), (1, 0), (0.5, 1)]).to_pixels(640, 480)
    assert pts.tolist() == [[0, 0], [640, 0], [320, 480]]


def berlin(y, m, d, hh, mm) -> dt.datetime:
    return dt.datetime(y, m, d, hh, mm, tzinfo=ZoneInfo("Europe/Berlin"))


NIGHT = ActiveWindow(start=dt.time(22, 0), end=dt.time(6, 0))


@pytest.mark.parametrize("local, active", [
    ((2026, 3, 2, 21, 59), False), ((2026, 3, 2, 22, 0), True), ((2026, 3, 2, 23, 59), True),
    ((2026, 3, 3, 0, 0), True), ((2026, 3, 3, 5, 59), True), ((2026, 3, 3, 6, 0), False),
    ((2026, 3, 3, 12, 0), False),
])
def test_window_across_midnight(local, active):
    assert Schedule([NIGHT], "Europe/Berlin").active(berlin(*local)) is active


def test_time_zone_is_applied_to_utc_timestamps():
    sched = Schedule([NIGHT], "Europe/Berlin")
    # 21:30 UTC in winter is 22:30 in Berlin (active); 04:30 UTC is 05:30 (active); 05:30 UTC is 06:30 (not)
    utc = dt.timezone.utc
    assert sched.active(dt.datetime(2026, 1, 10, 21, 30, tzinfo=utc))
    assert sched.active(dt.datetime(2026, 1, 10, 4, 30, tzinfo=utc))
    assert not sched.active(dt.datetime(2026, 1, 10, 5, 30, tzinfo=utc))
    # summer time: 20:30 UTC is 22:30 CEST
    assert sched.active(dt.datetime(2026, 7, 10, 20, 30, tzinfo=utc))
    assert not Schedule([NIGHT], "UTC").active(dt.datetime(2026, 7, 10, 20, 30, tzinfo=utc))


def test_days_belong_to_the_evening_a_window_starts():
    fri_night = ActiveWindow(start=dt.time(22, 0), end=dt.time(6, 0), days=("fri",))
    sched = Schedule([fri_night], "Europe/Berlin")
    assert sched.active(berlin(2026, 3, 6, 23, 0))      # Friday 23:00
    assert sched.active(berlin(2026, 3, 7, 3, 0))       # Saturday 03:00: still Friday's window
    assert not sched.active(berlin(2026, 3, 7, 23, 0))  # Saturday 23:00
    assert not sched.active(berlin(2026, 3, 6, 3, 0))   # Friday 03:00 belongs to Thursday's window


def test_day_window_and_always():
    office = ActiveWindow(start=dt.time(8, 0), end=dt.time(18, 0), days=("mon", "tue", "wed", "thu", "fri"))
    sched = Schedule([office], "UTC")
    assert sched.active(dt.datetime(2026, 3, 2, 9, 0, tzinfo=dt.timezone.utc))       # Monday
    assert not sched.active(dt.datetime(2026, 3, 1, 9, 0, tzinfo=dt.timezone.utc))   # Sunday
    assert Schedule(None, "UTC").active(dt.datetime(2026, 3, 1, 3, 0))                # no windows: always
