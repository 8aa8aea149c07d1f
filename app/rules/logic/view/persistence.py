"""A change must last before it counts: per kind, a problem starts (or ends) only after
its condition held on every check for ``persist_s`` of capture time and at least
MIN_CHECKS checks, with no gap longer than ``max_gap_s`` between them.

Why both a time and a count: the time makes the behaviour independent of the frame rate;
the count keeps one or two unlucky frames of a camera that posts rarely from deciding
anything. A check that cannot judge (vetoed, learning) restarts the evidence; so does
a gap: evidence from long ago says nothing about now.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Literal

MIN_CHECKS = 3


@dataclass
class Persistence:
    problem: bool = False
    since: dt.datetime | None = None  # when the current problem started / last ended
    evidence: dt.datetime | None = None  # first check of the current problem's evidence
    pending_since: dt.datetime | None = None
    pending_checks: int = 0

    def clear_pending(self) -> None:
        self.pending_since, self.pending_checks = None, 0

    def update(self, when: dt.datetime, raw: bool | None, persist_s: float, restart: bool,
               evidence_since: dt.datetime | None = None) -> Literal["started", "ended"] | None:
        """Feed one check's raw answer; returns the transition it completes, if any."""
        if raw is None or raw == self.problem:
            self.clear_pending()
            return None
        if self.pending_since is None or restart:
            self.pending_since = when if restart or evidence_since is None else min(evidence_since, when)
            self.pending_checks = 1
        else:
            self.pending_checks += 1
        if (when - self.pending_since).total_seconds() < persist_s or self.pending_checks < MIN_CHECKS:
            return None
        self.problem = not self.problem
        self.since, self.evidence = when, self.pending_since
        self.clear_pending()
        return "started" if self.problem else "ended"

    def end(self, when: dt.datetime) -> bool:
        """End an open problem now (accepted, relearning, disabled); True if one was open."""
        was = self.problem
        self.problem, self.since, self.evidence = False, when, None
        self.clear_pending()
        return was
