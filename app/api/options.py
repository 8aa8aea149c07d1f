"""What the HTTP layer needs from the settings (app/wiring fills it; routes never see ``Settings``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from app.inference.pipeline import DetectParams


@dataclass(frozen=True, slots=True)
class ApiOptions:
    defaults: DetectParams = field(default_factory=DetectParams)  # conf, iou, max_det when a request omits them
    device: str = "cpu"  # reported in replies
    max_body_bytes: int = 20 * 1024 * 1024
    max_batch_images: int = 16
    public_routes: frozenset[str] = frozenset({"/health/live", "/health/ready"})
    body_read_timeout_s: float = 30.0
    replica_id: str = "replica"  # named in GET /status (CAMPUSGUARD_REPLICA_ID, or the host name)
    bind_frames_to_key_cameras: bool = False  # a key's cameras: (keys file) bind POSTed frames' camera_id too
