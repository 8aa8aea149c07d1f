"""HTTP models of the routes the operator console uses (auth, site, frames, status).

Kept apart from app/api/schemas.py (detection and events) so each file stays one topic.
"""

from __future__ import annotations


from pydantic import BaseModel, Field



class AuthInfo(BaseModel):
    """Who the caller is, so a page can show or hide what the role may do."""

    auth_enabled: bool = Field(description="False: no API keys are configured and every route is open")
    role: str = Field(examples=["viewer"], description="viewer, operator, camera or admin")
    permissions: list[str] = Field(examples=[["read"]], description="Subset of read, review, detect, admin")
    key_id: str | None = Field(None, examples=["key:1a2b3c4d"], description="First 8 hex of the key's SHA-256")
