"""GET /auth/check: the load balancer asks whether a request may pass, before it reads the body.

nginx's ``auth_request`` (deploy/nginx/nginx.conf) sends a bodiless subrequest here with the
client's headers (``X-API-Key``) plus ``X-Original-Method`` and ``X-Original-URI``. This route
finds the route that method and URI would reach and runs the same gate as the route itself
(app/api/access.py): the same keyring, role table, failed-key throttle, log line, metric and
audit record, named after the original request. So a 19 MB upload without a valid key is
refused before nginx reads a byte of it, and the refusal is the one the route would give.

``auth_request`` accepts only 2xx, 401 and 403 from its subrequest (anything else becomes a
500), so the answer is 204 (may pass), 401 or 403; a 429 (the address is blocked after wrong
keys) travels as 403 with ``X-CampusGuard-Status: 429``. Every refusal carries its JSON error
body, exactly as the route would write it, in ``X-CampusGuard-Error`` (ASCII JSON), which
nginx returns as the body of the client's answer, with ``Retry-After`` where there is one.

What passes without a key: public routes (``CAMPUSGUARD_PUBLIC_ROUTES``) and routes that
declare no permission (the console's static files, the docs' assets, and the DeepStack route,
whose key may come in the multipart body: that route checks it itself once the form is read,
and nginx does not ask here for it). A method or path that
matches no route needs a valid key (any role): the load balancer reads no body for a
request nobody could have made without one.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from urllib.parse import unquote, urlsplit

from fastapi import APIRouter, Header, Request, Response
from starlette.routing import BaseRoute, Match

from app.api.access import declared_permissions, declared_permissions_in_order, dependency_names
from app.api.deps import GateDep, OptionsDep, SuppliedKey
from app.api.errors import error_body
from app.core.errors import InvalidParameter, ServiceError

router = APIRouter(tags=["auth"], include_in_schema=False)
PASS_STATUSES = (401, 403)  # what auth_request passes on; other refusals travel as 403 + X-CampusGuard-Status
MAX_URI = 8192


def flat_routes(routes: Iterable[BaseRoute], prefix: str = "") -> Iterator[tuple[str, BaseRoute]]:
    """(prefix, route) for every route, included routers opened (FastAPI keeps an included
    router as one entry whose ``original_router`` holds the routes with their dependencies)."""
    for route in routes:
        inner = getattr(route, "original_router", None)
        if inner is None:
            yield prefix, route
        else:
            yield from flat_routes(inner.routes,
                                   prefix + (getattr(getattr(route, "include_context", None), "prefix", "") or ""))


def target_route(request: Request, method: str, path: str) -> tuple[BaseRoute | None, bool]:
    """The route ``method path`` reaches, and whether the method matched too (False: a 405).
    Like the router, a path that matches only with its trailing slash toggled reaches that
    route (the service answers it with a redirect: ``/ui`` -> ``/ui/``)."""
    route, method_ok = _match(request, method, path)
    if route is None and request.app.router.redirect_slashes and path != "/":
        route, method_ok = _match(request, method, path[:-1] if path.endswith("/") else path + "/")
    return route, method_ok


def _match(request: Request, method: str, path: str) -> tuple[BaseRoute | None, bool]:
    partial: BaseRoute | None = None
    for prefix, route in flat_routes(request.app.router.routes):
        if not path.startswith(prefix):
            continue
        scope = {"type": "http", "method": method, "path": path[len(prefix):] or "/", "root_path": "",
                 "headers": [], "query_string": b""}
        match, _ = route.matches(scope)
        if match == Match.FULL:
            return route, True
        if match == Match.PARTIAL and partial is None:
            partial = route
    return partial, False


def needs_key(route: BaseRoute) -> bool:
    """A route that checks the caller: a ``require_<permission>`` or the any-key ``caller`` dependency."""
    return "caller" in dependency_names(route) or bool(declared_permissions(route))


def refusal(exc: ServiceError, path: str) -> Response:
    """The refusal as auth_request can pass it on: status 401/403, the route's own JSON body in a header."""
    status, body = error_body(exc.status, exc.code, exc.message, path, exc.detail)
    text = json.dumps(body, ensure_ascii=True, separators=(",", ":"))
    headers = {"X-CampusGuard-Error": text, "X-CampusGuard-Status": str(status), "Cache-Control": "no-store"}
    if exc.retry_after:
        headers["Retry-After"] = str(max(1, round(exc.retry_after)))
    return Response(text, status if status in PASS_STATUSES else 403, headers=headers, media_type="application/json")


@router.get("/auth/check", status_code=204)
def check(request: Request, gate: GateDep, options: OptionsDep, supplied: SuppliedKey = None,
          x_original_method: str = Header(..., max_length=16),
          x_original_uri: str = Header(..., max_length=MAX_URI)) -> Response:
    """204 if the original request may pass the load balancer, else 401/403 with its error."""
    method = x_original_method.upper()
    if not method.isalpha():
        raise InvalidParameter("X-Original-Method must be an HTTP method")
    path = unquote(urlsplit(x_original_uri).path) or "/"
    route, method_ok = target_route(request, method, path)
    if route is None or not method_ok:
        permissions: Iterable[str | None] = [None]  # no such route: any valid key, and the service answers 404/405
    elif needs_key(route) and getattr(route, "path", path) not in options.public_routes:
        permissions = declared_permissions_in_order(route) or [None]
    else:
        return Response(status_code=204)
    original = Request({**request.scope, "method": method, "path": path, "route": route}, request.receive)
    try:
        for permission in permissions:
            principal = gate.check(original, supplied, permission)
    except ServiceError as exc:
        return refusal(exc, path)
    return Response(status_code=204, headers={"X-CampusGuard-Key": principal.name})
