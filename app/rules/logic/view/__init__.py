"""Camera view checks (issue 25): is a camera covered, blinded, moved, out of focus or frozen?

Pure per-camera logic on numpy / OpenCV / pydantic, driven by the frames' capture times:
``ViewMonitor(options).observe(when, frame, boxes)`` returns the problems that started or
ended; ``state()`` says where each check stands; ``accept()`` makes the current view the
reference. ``ViewCheckOptions`` / ``parse_options`` validate a camera's ``view_checks:``;
``render_transition`` draws the before/after pair. docs/rules.md ("Camera view checks") has the details.
"""

from app.rules.logic.view.monitor import ViewCheckError, ViewMonitor
from app.rules.logic.view.render import render_transition, side_by_side
from app.rules.logic.view.state import KindState, ViewState, ViewTransition
from app.rules.site.viewchecks import KINDS, Kind, ViewCheckConfigError, ViewCheckOptions, parse_options

__all__ = ["KINDS", "Kind", "KindState", "ViewCheckConfigError", "ViewCheckError", "ViewCheckOptions",
           "ViewMonitor", "ViewState", "ViewTransition", "parse_options", "render_transition", "side_by_side"]
