"""The end-of-run list of slow tests without a heavy marker (tests/support/slowwatch.py)."""

from __future__ import annotations

from types import SimpleNamespace

from tests.support.slowwatch import SLOW_S, SlowWatch


def phase(nodeid: str, seconds: float, *markers: str) -> SimpleNamespace:
    keywords = {nodeid.split("::")[-1]: 1, "unit": 1, **{m: 1 for m in markers}}
    return SimpleNamespace(nodeid=nodeid, duration=seconds, keywords=keywords)


def test_only_tests_over_the_limit_without_a_heavy_marker_are_listed_slowest_first():
    watch = SlowWatch()
    for report in (phase("t.py::setup_heavy", 15.0), phase("t.py::setup_heavy", 6.0),  # setup + call add up
                   phase("t.py::quick", 19.9), phase("t.py::marked", 60.0, "slow"),
                   phase("t.py::real_server", 45.0, "server"), phase("t.py::worst", 58.0, "timeout"),
                   phase("t.py::browser", 30.0, "browser")):
        watch.record(report)
    assert watch.unmarked() == [("t.py::worst", 58.0), ("t.py::setup_heavy", 21.0)]
    lines = watch.lines()
    assert lines[0].startswith(f"2 test(s) took over {SLOW_S:.0f} s without a slow/server/pg/mqtt/browser/streams")
    assert lines[1:] == ["    58.0s t.py::worst", "    21.0s t.py::setup_heavy"]


def test_a_quick_run_reports_nothing():
    watch = SlowWatch()
    watch.record(phase("t.py::a", 0.2))
    assert watch.unmarked() == [] and watch.lines() == []
