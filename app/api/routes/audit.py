"""GET /audit: the audit trail, newest first, paged with a cursor (admin only; read-only).

There is no route that changes or deletes a record: the trail is append-only
(app/rules/store/audit.py); only retention (``CAMPUSGUARD_AUDIT_RETAIN_DAYS``) removes records.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import AfterValidator, BaseModel, Field

from app.api.deps import Admin, AuditDep
from app.api.schemas import error_responses
from app.core.audit import ACTIONS
from app.core.text import clean_text

router = APIRouter(tags=["audit"], dependencies=[Admin], responses=error_responses(401, 403, 429))
MAX_CURSOR = 2**62  # beyond any id; bigger values overflow the database's integer


class AuditRecord(BaseModel):
    id: int = Field(description="Grows with every record; the cursor of the next page")
    at: dt.datetime
    actor: str = Field(examples=["alice"], description="The key's name (key:<8 hex> for a key of "
                       "CAMPUSGUARD_API_KEYS or a wrong key; anonymous without keys; system:<trigger>); never a key")
    client: str | None = Field(None, examples=["10.1.2.3"], description="The client address")
    action: str = Field(examples=["zone.put"], description=", ".join(ACTIONS))
    target: str = Field(examples=["gate-cam/gate"], description="What was changed (camera/zone, event id, camera id, "
                        "site, the keys file, or the refused request)")
    outcome: str = Field(examples=["ok"], description="ok, or refused (an admin route refused this caller)")
    before: str | None = Field(None, description="Short JSON of the state before (cut at 2,000 characters)")
    after: str | None = Field(None, description="Short JSON of the state after, or why it was refused; a record "
                              "of repeated refusals: JSON reason, count, first_at, last_at, clients")


class AuditPage(BaseModel):
    items: list[AuditRecord]
    next_cursor: str | None = Field(None, description="Pass as `cursor` for older records; null on the last page")


@router.get("/audit", response_model=AuditPage, summary="The audit trail: who changed what, newest first",
            responses=error_responses(404, 422, 503))
async def audit_page(
    audit: AuditDep,
    cursor: Annotated[str | None, Query(pattern=r"^[0-9]{1,19}$",
                                        description="`next_cursor` of the previous page")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    # NUL or a lone surrogate: 422 here, not a database error (a 500 on PostgreSQL)
    action: Annotated[str | None, Query(max_length=32, description="Only this action"),
                      AfterValidator(clean_text)] = None,
    actor: Annotated[str | None, Query(max_length=128, description="Only this key name"),
                     AfterValidator(clean_text)] = None,
    exclude_action: Annotated[str | None, Query(max_length=32, description="All but this action "
                                                "(`auth.refused`: the console's \"hide refusals\")"),
                              AfterValidator(clean_text)] = None,
) -> AuditPage:
    """Every change a person made (zone edits, reloads, camera resets, event reviews, keys-file
    reloads) and every refused admin attempt, with the key's name, the client address, a short
    before/after and the time (a key's repeated refusals on one route within 5 minutes: the first,
    then one record with their count). 404 ``audit_disabled`` without an event store (no site file)."""
    position = min(int(cursor), MAX_CURSOR) if cursor is not None else None
    items, after = await asyncio.to_thread(audit.page, cursor=position, limit=limit, action=action, actor=actor,
                                           exclude_action=exclude_action)
    return AuditPage(items=[AuditRecord(**i) for i in items], next_cursor=str(after) if after is not None else None)
