"""What a view monitor tells its caller: transitions (a problem started / ended) and its
state (per kind: ok / problem / learning / suspended / off, since when).

Transitions carry the before/after images as arrays in the caller's channel order; the
caller renders them (``render.side_by_side``) and stores them where its evidence goes.
The state is a pydantic model: it goes to the console and to metrics as JSON as is.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict

from app.rules.site.viewchecks import Kind

Status = Literal["ok", "problem", "learning", "suspended", "off"]
Mode = Literal["day", "night"]


@dataclass(frozen=True)
class ViewTransition:
    """A problem ``started`` or ``ended`` at capture time ``at``.

    ``since`` is the capture time of the first check that showed the change (for frozen:
    the frame since which the picture has not changed). A started transition carries the
    reference view (``reference_image``, "before") and the frame that decided it
    (``current_image``, "after"), at most 480 px wide. ``reason`` of an ended transition:
    ``healthy`` (the view is back), ``accepted`` (the operator accepted the view),
    ``relearning`` (the frame size changed) or ``disabled``.
    """

    kind: Kind
    state: Literal["started", "ended"]
    at: dt.datetime
    since: dt.datetime
    mode: Mode | None = None
    reason: str = ""
    reference_image: np.ndarray | None = None
    current_image: np.ndarray | None = None
    metrics: dict[str, float] = field(default_factory=dict)


class KindState(BaseModel):
    model_config = ConfigDict(frozen=True)

    status: Status
    since: dt.datetime | None = None  # when this status began (capture time)
    pending_since: dt.datetime | None = None  # a change seen, not yet persisted
    note: str | None = None


class ViewState(BaseModel):
    """One camera's view checks, for the console and metrics."""

    model_config = ConfigDict(frozen=True)

    enabled: bool
    mode: Mode | None  # light mode of the last check
    last_check: dt.datetime | None
    frame_size: tuple[int, int] | None  # (width, height) the references belong to
    learned: dict[Mode, dt.datetime | None]  # when each mode's reference was learned
    learning: float  # progress 0..1 of the current mode's reference
    sparse: bool  # the last gap between checks exceeded max_gap_s: evidence restarted
    checks: dict[Kind, KindState]

    @property
    def problems(self) -> list[Kind]:
        return [k for k, s in self.checks.items() if s.status == "problem"]
