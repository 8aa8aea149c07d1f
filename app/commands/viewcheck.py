"""`campusguard viewcheck-report`: the camera view checks on their labelled real-photo test set.

Confusion tables per part (tuned, set aside, fresh), time to alarm and the per-check cost
benchmark; the test set and the results are in docs/rules.md ("Camera view checks"). The
command is app/tooling/viewcheck/report.py (also ``python -m app.tooling.viewcheck.report``).
"""

from __future__ import annotations

from app.tooling.viewcheck.report import configure, run

__all__ = ["configure", "run"]
