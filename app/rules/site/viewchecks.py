"""Per-camera view-check options: the site file's ``view_checks:`` block, validated.

It lives with the site file's schema (``Camera.view_checks`` in schema.py embeds
``ViewCheckOptions``) so that the site layer validates it with everything else; the view
checks themselves (app/rules/logic/view/) read it from here.

Strict (no type coercion, unknown keys refused, bounds checked), on by default, and every
error names its field, so the site loader can report ``view_checks.persist_s: ...``
exactly as it reports zone errors. Thresholds are not options: ``sensitivity`` picks one of
three tuned sets (``THRESHOLDS``), so a site cannot tune itself into a check that never
fires or always does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

Kind = Literal["blinded", "covered", "moved", "defocused", "frozen"]
KINDS: tuple[Kind, ...] = ("blinded", "covered", "moved", "defocused", "frozen")  # priority order
Sensitivity = Literal["low", "normal", "high"]


@dataclass(frozen=True)
class Thresholds:
    """Decision thresholds (ratios are "current / reference" unless said otherwise)."""

    blinded_saturated: float  # burnt-out share of the picture above the reference's
    covered_still: float  # layout correlation with the reference below this ...
    covered_detail: float  # ... and structure below this share of the reference's: covered
    smeared_detail: float  # or structure below this share ...
    smeared_texture: float  # ... and structure per brightness below this share ...
    smeared_dim: float  # ... and brightness below this share (paint darkens; a soft lens does not): covered
    moved_gate: float  # layout correlation below this starts the motion search
    moved_aligned: float  # the moved reference must match at least this well ...
    moved_shift: float  # ... for a shift of at least this share of the width ...
    moved_angle: float  # ... or a roll of at least this many degrees
    replaced_structure: float  # or the fine structure correlates below this (not covered): turned away
    defocus_sharpness: float  # fine detail below this share of the reference's
    frozen_tolerance: float  # mean raw difference (grey levels) still counted as identical


THRESHOLDS: dict[str, Thresholds] = {
    "low": Thresholds(0.45, 0.45, 0.4, 0.22, 0.35, 0.8, 0.85, 0.85, 0.08, 3.5, 0.2, 0.10, 0.4),
    "normal": Thresholds(0.35, 0.6, 0.5, 0.3, 0.45, 0.85, 0.9, 0.8, 0.05, 2.5, 0.3, 0.15, 0.6),
    "high": Thresholds(0.25, 0.7, 0.6, 0.4, 0.55, 0.9, 0.93, 0.75, 0.035, 2.0, 0.4, 0.22, 0.8),
}


class ViewCheckOptions(BaseModel):
    """``view_checks:`` of one camera. Times are capture-time seconds."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)

    enabled: bool = True
    sensitivity: Sensitivity = "normal"
    checks: list[Kind] = Field(default_factory=lambda: list(KINDS), min_length=1,
                               description="which problems to report (all by default)")
    interval_s: float = Field(2.0, ge=0.5, le=60, description="at most one check per this many seconds")
    persist_s: float = Field(10.0, ge=0, le=600, description="a change must last this long before it is a problem")
    frozen_after_s: float = Field(60.0, ge=10, le=3600, description="identical frames for this long: frozen")
    learn_s: float = Field(60.0, ge=10, le=3600, description="the reference is learned over this long")
    max_gap_s: float = Field(60.0, ge=1, le=3600, description="checks further apart than this restart the evidence")
    veto_area: float = Field(0.2, gt=0, le=1, description="a detected object this large (share of the frame) "
                                                          "vetoes covered, moved and defocused")
    veto_confidence: float = Field(0.3, ge=0, le=1)

    @field_validator("checks")
    @classmethod
    def _unique(cls, value: list[str]) -> list[str]:
        if len(set(value)) != len(value):
            raise ValueError("each check may be listed once")
        return value

    @field_validator("max_gap_s")
    @classmethod
    def _gap_covers_interval(cls, value: float, info: ValidationInfo) -> float:
        interval = info.data.get("interval_s")
        if interval is not None and value < interval:
            raise ValueError(f"must be at least interval_s ({interval:g})")
        return value

    @property
    def thresholds(self) -> Thresholds:
        return THRESHOLDS[self.sensitivity]


class ViewCheckConfigError(ValueError):
    """Invalid ``view_checks``; ``errors`` is ``[{"field", "message"}]`` like the site file's."""

    def __init__(self, errors: list[dict[str, str]]):
        self.errors = errors
        super().__init__("; ".join(f"{e['field']}: {e['message']}" for e in errors))


def parse_options(data: Mapping[str, Any] | None, where: str = "view_checks") -> ViewCheckOptions:
    """Validate a ``view_checks`` mapping (None = defaults); errors name ``where.<field>``."""
    if data is None:
        return ViewCheckOptions()
    if not isinstance(data, Mapping):
        raise ViewCheckConfigError([{"field": where, "message": "must be a mapping"}])
    try:
        return ViewCheckOptions.model_validate(dict(data))
    except ValidationError as exc:
        raise ViewCheckConfigError([
            {"field": ".".join([where, *(str(p) for p in err["loc"])]), "message": err["msg"]}
            for err in exc.errors()]) from None
