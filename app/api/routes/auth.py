"""GET /auth/me: the caller's name, role and permissions (the console asks once, then adapts)."""

from __future__ import annotations

from fastapi import APIRouter

from app.api.console_schemas import AuthInfo
from app.api.deps import CallerDep, GateDep
from app.api.schemas import error_responses
from app.core.roles import PERMISSIONS, ROLE_PERMISSIONS

router = APIRouter(tags=["auth"], responses=error_responses(401, 403, 429))


@router.get("/auth/me", response_model=AuthInfo, summary="The caller's name, role and permissions")
def me(caller: CallerDep, gate: GateDep) -> AuthInfo:
    """Any valid key may ask (no permission needed); 401 without a key, 403 with an unknown one.
    Without configured keys: ``auth_enabled: false``, ``auth`` says why (``off``: CAMPUSGUARD_AUTH=off;
    ``loopback``: no keys, listening on loopback only) and every permission."""
    named = gate.keyring.required
    return AuthInfo(auth_enabled=named, auth=gate.mode, role=caller.role, name=caller.name if named else None,
                    key_id=caller.name if named else None,
                    permissions=[p for p in PERMISSIONS if p in ROLE_PERMISSIONS[caller.role]])
