"""Capture-time policy (issue 15): far-future, far-past, zone-less and DST-edge capture times,
a long silence between frames, reloads and resets ending events at the camera's own time."""

from __future__ import annotations

import datetime as dt
import shutil
from zoneinfo import ZoneInfo

import pytest

from app.config import Settings
from app.core.errors import InvalidTimestamp, NotFound
from app.core.metrics import Metrics
from app.rules.logic.capture_time import CaptureTimePolicy
from app.rules.site.loader import SiteConfigError, load_site_config
from app.rules.service.facade import RulesService
from app.wiring import build_rules
from tests.support.rules_util import EXAMPLE_SITE, H, W, people

UTC = dt.timezone.utc
BERLIN = dt.timezone(dt.timedelta(hours=1))  # Europe/Berlin in winter
BERLIN_TZ = ZoneInfo("Europe/Berlin")
NOW = dt.datetime(2026, 10, 25, 1, 30, tzinfo=UTC)  # 02:30 CET, just after the autumn DST change
POLICY = CaptureTimePolicy(max_skew_s=300, max_age_s=86_400)


@pytest.mark.parametrize("when, reason", [
    (dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC), "future"),
    (dt.datetime(2100, 1, 1, tzinfo=UTC), "future"),
    (NOW + dt.timedelta(seconds=301), "future"),
    (dt.datetime(1, 1, 1, tzinfo=UTC), "past"),
    (dt.datetime(1, 1, 1, tzinfo=dt.timezone(dt.timedelta(hours=5))), "past"),  # year 0 in UTC
    (dt.datetime(1, 1, 1), "past"),                                              # zone-less
    (NOW - dt.timedelta(days=1, seconds=1), "past"),
    # 03:36 CET is 02:36 UTC: 66 min ahead, though the wall clock only went 6 min past the repeated hour
    (dt.datetime(2026, 10, 25, 3, 36, tzinfo=BERLIN_TZ), "future"),
])
def test_implausible_capture_times_are_refused(when, reason):
    with pytest.raises(InvalidTimestamp) as info:
        POLICY.check(when, now=NOW)
    assert info.value.status == 422 and info.value.code == "invalid_timestamp" and info.value.reason == reason
    assert "clock" in info.value.message


@pytest.mark.parametrize("when", [
    NOW + dt.timedelta(seconds=300),                           # skew at the limit
    NOW - dt.timedelta(days=1),                                # age at the limit
    dt.datetime(2026, 10, 25, 1, 30),                          # zone-less = UTC
    dt.datetime(2026, 10, 25, 2, 30, tzinfo=BERLIN),           # the repeated hour, second pass (CET)
    dt.datetime(2026, 10, 25, 2, 30, tzinfo=dt.timezone(dt.timedelta(hours=2))),  # first pass (CEST)
    dt.datetime(2026, 10, 24, 23, 59, 59, tzinfo=UTC),
    dt.datetime(2026, 10, 25, 2, 30, tzinfo=BERLIN_TZ, fold=0),  # the repeated hour in the IANA zone: CEST
    dt.datetime(2026, 10, 25, 2, 30, tzinfo=BERLIN_TZ, fold=1),  # ... and CET (= NOW)
])
def test_plausible_capture_times_are_accepted_as_utc(when):
    got = POLICY.check(when, now=NOW)
    assert got.tzinfo is UTC
    # compared as instants: PEP 495 makes inter-zone == false for times in a repeated hour
    assert got.timestamp() == (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
    assert got.utcoffset() == dt.timedelta(0)


def test_absent_time_is_now():
    assert POLICY.check(None, now=NOW) == NOW


# --- the service: counted refusals, the camera goes on ---------------------------------------

@pytest.fixture
def service(tmp_path):
    path = tmp_path / "site.yaml"
    shutil.copy(EXAMPLE_SITE, path)
    metrics = Metrics()
    svc = build_rules(Settings(site_config=path, events_db_url=f"sqlite:///{tmp_path}/e.db",
                                              snapshot_dir=tmp_path / "snaps"), metrics)
    yield svc, metrics, path
    svc.stop()


def refused(metrics: Metrics, camera: str, reason: str) -> float:
    return metrics.registry.get_sample_value("campusguard_invalid_timestamps_total",
                                             {"camera_id": camera, "reason": reason}) or 0.0


def crowd_frames(svc, start: dt.datetime, seconds, n=3):
    out = []
    for s in seconds:
        out += svc.evaluate("plaza-cam", start + dt.timedelta(seconds=s), (W, H), people(n))
    return out


def test_refusal_is_counted_per_camera_and_the_next_frame_is_evaluated(service):
    svc, metrics, _ = service
    for bad in (dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC), dt.datetime(2100, 1, 1, tzinfo=UTC)):
        with pytest.raises(InvalidTimestamp):
            svc.accept_capture_time("plaza-cam", bad)
    with pytest.raises(InvalidTimestamp):
        svc.accept_capture_time("plaza-cam", dt.datetime(1, 1, 1, tzinfo=UTC))
    assert refused(metrics, "plaza-cam", "future") == 2 and refused(metrics, "plaza-cam", "past") == 1
    # the rule clock was never moved: normal frames start and end a crowd event as usual
    t0 = svc.accept_capture_time("plaza-cam", None) - dt.timedelta(seconds=30)
    events = crowd_frames(svc, t0, range(11))
    assert [e["state"] for e in events] == ["started"]
    assert events[0]["started_at"] == (t0 + dt.timedelta(seconds=10)).isoformat().replace("+00:00", "Z")


def test_long_silence_resets_a_pending_condition(service):
    svc, _, _ = service
    t0 = dt.datetime(2026, 3, 2, 12, tzinfo=UTC)
    assert crowd_frames(svc, t0, [0]) == []
    five_hours = 5 * 3600
    assert crowd_frames(svc, t0, [five_hours]) == []  # min_duration_s is 10: not a standing crowd yet
    got = crowd_frames(svc, t0, [five_hours + s for s in range(1, 11)])
    assert [e["state"] for e in got] == ["started"]
    assert got[0]["started_at"] == "2026-03-02T17:00:10Z"


def test_reload_ends_events_at_the_cameras_time(service):
    svc, _, path = service
    t0 = dt.datetime(2026, 3, 2, 12, tzinfo=UTC)  # far behind the server clock (a camera replaying)
    started = crowd_frames(svc, t0, range(12))
    assert [e["state"] for e in started] == ["started"]
    path.write_text(path.read_text().replace("min_count: 3", "min_count: 4"))  # plaza-cam changes
    svc.reload()
    stored = svc.get_event(started[0]["id"])
    assert stored["state"] == "ended"
    assert stored["ended_at"] == "2026-03-02T12:00:11Z"  # the camera's last frame, not now
    assert stored["ended_at"] >= stored["started_at"]


def test_reset_camera_ends_its_events_and_forgets_its_clock(service):
    svc, _, _ = service
    late = dt.datetime(2026, 3, 2, 12, tzinfo=UTC)
    started = crowd_frames(svc, late, range(12))
    assert svc.open_events("plaza-cam")
    assert svc.reset_camera("plaza-cam") == 1
    assert svc.open_events("plaza-cam") == []
    assert svc.get_event(started[0]["id"])["ended_at"] == "2026-03-02T12:00:11Z"
    # the clock starts afresh: an earlier time is evaluated as such, not clamped to the old one
    earlier = late - dt.timedelta(hours=1)
    got = crowd_frames(svc, earlier, range(11))
    assert [e["started_at"] for e in got] == ["2026-03-02T11:00:10Z"]
    with pytest.raises(NotFound) as info:
        svc.reset_camera("no-such-cam")
    assert info.value.code == "unknown_camera"


def test_non_utf8_site_file_is_a_site_config_error(tmp_path, service):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(EXAMPLE_SITE.read_bytes().replace(b"Library plaza", "Bibliothèque".encode("latin-1")))
    with pytest.raises(SiteConfigError) as info:
        load_site_config(bad)
    assert info.value.code == "invalid_site_config" and "not UTF-8" in info.value.errors[0]
    svc, _, path = service
    path.write_bytes(bad.read_bytes())
    with pytest.raises(SiteConfigError):
        svc.reload()  # /admin/reload maps this to 422; the running config stays
    assert "plaza-cam" in svc.camera_ids


def test_non_utf8_site_file_stops_startup_with_the_reason(weights, tmp_path):
    from fastapi.testclient import TestClient

    from app.main import create_app

    bad = tmp_path / "latin1.yaml"
    bad.write_bytes(EXAMPLE_SITE.read_bytes() + "# Bibliothèque\n".encode("latin-1"))
    app = create_app(Settings(weights=weights, site_config=bad, events_db_url=f"sqlite:///{tmp_path}/e.db"))
    with pytest.raises(SiteConfigError, match="not UTF-8"):
        with TestClient(app):
            pass  # the lifespan refuses before the model is loaded
