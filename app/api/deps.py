"""Request dependencies: the app's services and API-key auth."""

from __future__ import annotations

import hashlib
import hmac
from typing import TYPE_CHECKING, Annotated

from fastapi import Depends, Request

from app.errors import Forbidden, NotFound, NotReady, Unauthorized

if TYPE_CHECKING:
    from app.rules.service import RulesService


def check_key(request: Request, supplied: str | None) -> None:
    """Constant-time comparison against every configured key (rotation: list old and new)."""
    keys: list[bytes] = request.app.state.api_keys
    if not keys:
        return
    if not supplied:
        raise Unauthorized("an API key is required (X-API-Key header)")
    candidate = supplied.encode()
    matched = False
    for key in keys:  # no early exit: timing does not reveal which key matched
        matched |= hmac.compare_digest(candidate, key)
    if not matched:
        raise Forbidden("the API key is not valid")


async def require_api_key(request: Request) -> None:
    check_key(request, request.headers.get("x-api-key"))


async def require_api_key_for_health(request: Request) -> None:
    if not request.app.state.settings.open_health:
        check_key(request, request.headers.get("x-api-key"))


async def require_api_key_for_metrics(request: Request) -> None:
    if not request.app.state.settings.open_metrics:
        check_key(request, request.headers.get("x-api-key"))


def engine_of(request: Request):
    """The inference engine if it can take work now: 503 while loading or full, checked
    before the body is read so overload costs no bandwidth or decoding."""
    engine = getattr(request.app.state, "engine", None)
    if engine is None:
        request.app.state.metrics.rejected.labels("not_ready").inc()
        raise NotReady(f"the model is not ready yet ({request.app.state.phase})")
    engine.check_capacity()
    return engine


def rules_service(request: Request) -> "RulesService":
    """The campus-rules service; 404 ``rules_disabled`` when no site file is configured."""
    rules = getattr(request.app.state, "rules", None)
    if rules is None:
        raise NotFound("rules are disabled: no site_config is set", code="rules_disabled")
    return rules


def key_id(request: Request) -> str | None:
    """Who is calling, as far as the API keys tell: ``key:<first 8 hex of its SHA-256>`` (never
    the key itself), or None when no keys are configured."""
    supplied = request.headers.get("x-api-key")
    if not request.app.state.api_keys or not supplied:
        return None
    return "key:" + hashlib.sha256(supplied.encode()).hexdigest()[:8]


RulesDep = Annotated["RulesService", Depends(rules_service)]
KeyIdDep = Annotated["str | None", Depends(key_id)]
