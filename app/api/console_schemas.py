"""HTTP models of the routes the operator console uses (auth, site, frames, status).

Kept apart from app/api/schemas.py (detection and events) so each file stays one topic.
"""

from __future__ import annotations


import datetime as dt
from typing import Any

from pydantic import BaseModel, Field



class AuthInfo(BaseModel):
    """Who the caller is, so a page can show or hide what the role may do."""

    auth_enabled: bool = Field(description="False: no API keys are configured and every route is open")
    role: str = Field(examples=["viewer"], description="viewer, operator, camera or admin")
    permissions: list[str] = Field(examples=[["read"]], description="Subset of read, review, detect, admin")
    key_id: str | None = Field(None, examples=["key:1a2b3c4d"], description="First 8 hex of the key's SHA-256")


class SiteDocument(BaseModel):
    """The running site config and the version of the file it was loaded from."""

    version: str = Field(examples=["3f2a9c0d1e4b5a67"], description="First 16 hex of the SHA-256 of the file; send as If-Match")
    path: str
    writable: bool = Field(description="False: zone edits answer 409 site_read_only (e.g. a ConfigMap mount)")
    loaded_at: dt.datetime
    config: dict[str, Any] = Field(description="The SiteConfig as JSON (cameras, zones, rules; see GET /site/schema)")


class ZoneSaved(BaseModel):
    version: str = Field(description="The new version of the site file")
    loaded_at: dt.datetime
    zone: dict[str, Any] | None = Field(None, description="The zone as validated (defaults filled in); absent on delete")
