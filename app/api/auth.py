"""GET /auth/me: the caller's role and permissions (the console asks once, then adapts)."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.console_schemas import AuthInfo
from app.api.deps import KeyIdDep, KeyringDep, RoleDep
from app.api.schemas import error_responses
from app.core.roles import PERMISSIONS, ROLE_PERMISSIONS

router = APIRouter(tags=["auth"], responses=error_responses(401, 403))


@router.get("/auth/me", response_model=AuthInfo, summary="The caller's role and permissions")
def me(role: RoleDep, keyring: KeyringDep, key: KeyIdDep) -> AuthInfo:
    """Any valid key may ask (no permission needed); 401 without a key, 403 with an unknown one.
    Without configured keys: ``auth_enabled: false`` and every permission."""
    return AuthInfo(auth_enabled=keyring.enabled, role=role, key_id=key,
                    permissions=[p for p in PERMISSIONS if p in ROLE_PERMISSIONS[role]])
