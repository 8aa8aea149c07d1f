"""The HTTP contract of a rollout (POST/GET /admin/models/{name}/rollout, GET /models' ``rollout``;
docs/models.md, "Rollout behind the shadow reference"). The console's Models page reads it."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Phase = Literal["shadow", "canary", "promoted", "rolled_back"]


class RolloutRequest(BaseModel):
    weights: str = Field(min_length=1, max_length=512, description="The candidate: a .pt or .onnx file inside the "
                                                                   "models folder (checked as a swap's weights)")
    cameras: list[str] | None = Field(None, max_length=1000, description="The canary cameras (cameras of the site "
                                      "file that use the model); default: the first half of its cameras, at least one")
    window_s: float = Field(300.0, gt=0, le=86_400, description="Each phase's rolling window, seconds; a phase "
                            "passes once it has lasted this long with its window within the bounds")
    min_frames: int = Field(50, ge=1, le=1_000_000, description="Frames compared in the window before a phase can "
                            "pass or fail")
    agreement_floor: float | None = Field(None, ge=0, le=1, description="Candidate vs current agreement (F1) below "
                                          "which it is rolled back; default: the shadow alert floor of the served "
                                          "precision (CAMPUSGUARD_SHADOW_ALERT_BELOW, else 0.95; 0.85 for int8)")
    max_error_ratio: float = Field(0.01, ge=0, le=1, description="Candidate errors per frame may exceed the "
                                   "current's by at most this (absolute)")
    max_latency_ratio: float = Field(2.0, gt=0, le=1000, description="Candidate p50 inference time / the "
                                     "current's, at most")
    map_floor: float | None = Field(None, ge=0, le=1, description="Candidates with other classes only: the mAP50-95 "
                                    "on the shared classes it needs (default: the current's minus 0.01)")


class RolloutSettingsOut(BaseModel):
    window_s: float
    min_frames: int
    agreement_floor: float
    max_error_ratio: float
    max_latency_ratio: float
    map_floor: float | None


class RolloutErrors(BaseModel):
    candidate: int = Field(description="Frames the candidate failed in the window (5xx: inference errors, timeouts)")
    current: int


class RolloutLatency(BaseModel):
    candidate_p50: float | None = Field(description="Median inference time of the candidate's frames in the window")
    current_p50: float | None


class RolloutPoint(BaseModel):
    at: str
    phase: str
    agreement: float | None
    compared: int


class RolloutOut(BaseModel):
    model: str
    candidate_weights: str
    current_weights: str
    phase: Phase
    reason: str | None = Field(description="Why the last phase change happened (held, rolled back and why, by hand)")
    started_at: str
    phase_started_at: str | None
    ended_at: str | None
    cameras: list[str] = Field(description="The canary cameras")
    settings: RolloutSettingsOut
    comparable: bool = Field(description="Same classes as the current model (compared box for box); false: judged "
                                         "by mAP before the start, then on errors and latency")
    map: dict | None = Field(None, description="Other classes only: the mAP check's figures")
    compared: int = Field(description="Frames both models ran in this phase's window")
    agreement: float | None = Field(description="F1 of the candidate's boxes against the current model's over the "
                                                "window (null: none compared, or other classes)")
    errors: RolloutErrors
    latency_ms: RolloutLatency
    history: list[RolloutPoint] = Field(description="One point per evaluation (about one a second), bounded: "
                                                    "agreement over time")
