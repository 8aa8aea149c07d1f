"""The one place where errors become HTTP replies."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.api.deepstack_errors import deepstack_error, is_deepstack
from app.core.errors import ServiceError

log = logging.getLogger("campusguard.api")
MAX_MESSAGE = 1000  # error messages built from client input stay readable and small


def error_body(status: int, code: str, message: str, path: str,
               detail: list | None = None) -> tuple[int, dict]:
    """(status, JSON body) of an error: the service's shape, or DeepStack's on its routes."""
    if len(message) > MAX_MESSAGE:
        message = message[:MAX_MESSAGE] + "..."
    if is_deepstack(path):
        return deepstack_error(status, message)
    body: dict[str, Any] = {"error": code, "message": message}
    if detail is not None:
        body["detail"] = detail
    return status, body


def error_response(status: int, code: str, message: str, request: Request,
                   detail: list | None = None, retry_after: float | None = None) -> JSONResponse:
    headers = {"Retry-After": str(max(1, round(retry_after)))} if retry_after else None
    status, body = error_body(status, code, message, request.url.path, detail)
    return JSONResponse(body, status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, request, retry_after=exc.retry_after,
                              detail=exc.detail)

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        # loc and msg only: pydantic's `input` would echo the client's value (a 2 MB parameter) back
        detail = [{"loc": [str(part)[:64] for part in e.get("loc", ())], "msg": e.get("msg", "")[:200],
                   "type": e.get("type", "")} for e in exc.errors()[:20]]
        message = "; ".join(f"{'.'.join(d['loc'])}: {d['msg']}" for d in detail) or "invalid request"
        return error_response(422, "invalid_parameter", message, request, detail=detail)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail), request)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s", request.url.path)
        return error_response(500, "internal_error", "internal server error", request)
