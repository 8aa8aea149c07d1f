"""Which tests took long without a marker that says so (docs/testing.md, "Markers and timeouts").

A test is heavy when it starts a real server, a database, a broker, a browser or camera
streams (those markers are derived from its fixtures, tests/conftest.py), or when it is marked
``slow`` by hand: then ``-m "not slow and not server ..."`` leaves it out of a quick run. A test
that takes over ``SLOW_S`` in the suite without any of these is listed at the end of the run,
so the next one is marked when it appears, not found by someone reading the durations.

The list is a report, not a failure: the same test takes twice as long on a loaded host, and a
timing that flips a run red would be a flaky test. The controller sees every worker's reports
(pytest-xdist hands them over), so one watch in the controller covers the whole run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SLOW_S = 20.0  # the issue 39 line: tests over 20 s are marked like the other heavy ones
HEAVY = frozenset({"slow", "server", "pg", "mqtt", "browser", "streams"})


@dataclass
class SlowWatch:
    """Adds up each test's setup, call and teardown; knows whether a heavy marker names it."""

    limit_s: float = SLOW_S
    seconds: dict[str, float] = field(default_factory=dict)
    marked: set[str] = field(default_factory=set)

    def record(self, report: Any) -> None:
        """One phase's ``TestReport`` (``nodeid``, ``duration``, ``keywords``: markers are keywords)."""
        self.seconds[report.nodeid] = self.seconds.get(report.nodeid, 0.0) + float(report.duration)
        if HEAVY & set(report.keywords):
            self.marked.add(report.nodeid)

    def unmarked(self) -> list[tuple[str, float]]:
        """(test, seconds) over the limit without a heavy marker, slowest first."""
        over = [(nodeid, s) for nodeid, s in self.seconds.items() if s > self.limit_s and nodeid not in self.marked]
        return sorted(over, key=lambda item: -item[1])

    def lines(self) -> list[str]:
        found = self.unmarked()
        if not found:
            return []
        return [f"{len(found)} test(s) took over {self.limit_s:.0f} s without a slow/server/pg/mqtt/browser/streams "
                f"marker: mark them @pytest.mark.slow (docs/testing.md, \"Markers and timeouts\")",
                *(f"  {s:6.1f}s {nodeid}" for nodeid, s in found)]


WATCH = SlowWatch()
