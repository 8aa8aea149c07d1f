"""GET /shadow/worst and its images: the frames where the primary and the reference disagree most.

Admin only: the frames are camera images, and the view is an engineer's tool (docs/shadow.md,
"Reading the worst frames"). 404 ``shadow_disabled`` while CAMPUSGUARD_SHADOW_BACKEND is empty.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

from fastapi import APIRouter, Path, Query
from fastapi.responses import Response
from pydantic import BaseModel, Field

from app.api.deps import Admin, ShadowDep
from app.api.schemas import error_responses
from app.core.errors import NotFound, ShadowDisabled
from app.inference.shadow.draw import draw_pair
from app.inference.shadow.lane import NoShadow, ShadowLane
from app.inference.shadow.worst import WorstFrame
from app.rules.site.schema import IDENT as CAMERA_RE

router = APIRouter(tags=["shadow"], dependencies=[Admin], responses=error_responses(401, 403, 404, 422, 429))
FRAME_ID = r"^[0-9a-f]{16}$"


class ShadowBox(BaseModel):
    x1: float
    y1: float
    x2: float
    y2: float
    confidence: float
    class_id: int
    class_name: str


class WorstFrameOut(BaseModel):
    id: str
    camera_id: str | None = Field(description="null: frames sent without camera_id")
    captured_at: str = Field(description="When the primary answered (ISO 8601, UTC)")
    agreement: float = Field(description="This frame's F1 of the primary against the reference")
    recall: float = Field(description="Reference boxes the primary found (1.0 when the reference found none)")
    precision: float = Field(description="Primary boxes matching a reference box (1.0 when the primary found none)")
    matched: int
    width: int = Field(description="Original frame width: boxes are in its pixels")
    height: int
    primary: list[ShadowBox] = Field(description="What the service answered")
    reference: list[ShadowBox] = Field(description="What the reference found on the fully decoded original")
    image_url: str = Field(description="The frame with both box sets drawn (JPEG, admin)")


class WorstList(BaseModel):
    window_s: float = Field(description="Frames older than this leave the list")
    frames: list[WorstFrameOut] = Field(description="Worst agreement first")


def lane_of(shadow: ShadowLane | NoShadow) -> ShadowLane:
    if not isinstance(shadow, ShadowLane):
        raise ShadowDisabled("the shadow reference is off (set CAMPUSGUARD_SHADOW_BACKEND; docs/shadow.md)")
    return shadow


def as_out(frame: WorstFrame, names: dict[int, str]) -> WorstFrameOut:
    def boxes(rows: list[list[float]]) -> list[ShadowBox]:
        return [ShadowBox(x1=b[0], y1=b[1], x2=b[2], y2=b[3], confidence=b[4], class_id=int(b[5]),
                          class_name=names.get(int(b[5]), str(int(b[5])))) for b in rows]

    s = frame.score
    return WorstFrameOut(id=frame.id, camera_id=frame.camera_id, captured_at=frame.captured_at,
                         agreement=round(s.agreement, 4),
                         recall=round(s.matched / s.reference if s.reference else 1.0, 4),
                         precision=round(s.matched / s.primary if s.primary else 1.0, 4), matched=s.matched,
                         width=frame.width, height=frame.height, primary=boxes(frame.primary),
                         reference=boxes(frame.reference), image_url=f"/shadow/worst/{frame.id}.jpg")


@router.get("/shadow/worst", response_model=WorstList,
            summary="Frames where the primary and the reference disagree most")
async def worst(shadow: ShadowDep,
                camera_id: Annotated[str | None, Query(pattern=CAMERA_RE, max_length=64,
                                                       description="Only this camera")] = None,
                limit: Annotated[int, Query(ge=1, le=500, description="At most this many frames")] = 50) -> WorstList:
    """The kept frames (at most 5 per camera, within the rolling window), worst first, with
    both box sets in original pixels and the URL of the drawn frame."""
    lane = lane_of(shadow)
    names = lane.reference.detector.names
    frames = lane.worst.listing(camera_id)[:limit]
    return WorstList(window_s=lane.worst.window_s, frames=[as_out(f, names) for f in frames])


@router.get("/shadow/worst/{frame_id}.jpg", response_class=Response, summary="A kept frame with both box sets drawn",
            responses={200: {"content": {"image/jpeg": {"schema": {"type": "string", "format": "binary"}}}}})
async def worst_image(shadow: ShadowDep,
                      frame_id: Annotated[str, Path(pattern=FRAME_ID, description="id from GET /shadow/worst")]
                      ) -> Response:
    """Green: found by both; red: the reference's box the primary missed; magenta: the
    primary's box the reference does not have (docs/shadow.md)."""
    lane = lane_of(shadow)
    frame = lane.worst.get(frame_id)
    if frame is None:
        raise NotFound("no such shadow frame (it may have left the window)")
    s = frame.score
    banner = (f"{frame.camera_id or '-'}  agreement {s.agreement:.2f}  matched {s.matched}  "
              f"primary {s.primary}  reference {s.reference}")
    jpeg = await asyncio.to_thread(draw_pair, frame.jpeg, frame.width, frame.primary, frame.reference,
                                   lane.reference.detector.names, banner)
    return Response(jpeg, media_type="image/jpeg", headers={"Cache-Control": "no-store"})
