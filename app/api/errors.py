"""The one place where errors become HTTP replies."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from app.errors import ServiceError

log = logging.getLogger("campusguard.api")
DEEPSTACK_PREFIX = "/v1/vision/"


def error_response(status: int, code: str, message: str, request: Request | None = None,
                   detail: list | None = None, retry_after: float | None = None) -> JSONResponse:
    headers = {"Retry-After": str(max(1, round(retry_after)))} if retry_after else None
    if request is not None and request.url.path.startswith(DEEPSTACK_PREFIX):
        # DeepStack clients (Blue Iris, Home Assistant, Frigate) read {"success": false, "error": ...}
        # and DeepStack answers every bad input (image or parameter) with 400.
        status = 400 if status in (415, 422) else status
        return JSONResponse({"success": False, "error": message, "code": status}, status, headers=headers)
    body = {"error": code, "message": message}
    if detail is not None:
        body["detail"] = detail
    return JSONResponse(body, status, headers=headers)


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(ServiceError)
    async def _service_error(request: Request, exc: ServiceError) -> JSONResponse:
        return error_response(exc.status, exc.code, exc.message, request, retry_after=exc.retry_after,
                              detail=getattr(exc, "errors", None))

    @app.exception_handler(RequestValidationError)
    async def _validation(request: Request, exc: RequestValidationError) -> JSONResponse:
        detail = [{"loc": list(e.get("loc", ())), "msg": e.get("msg", ""), "type": e.get("type", "")}
                  for e in exc.errors()]
        message = "; ".join(f"{'.'.join(map(str, d['loc']))}: {d['msg']}" for d in detail) or "invalid request"
        return error_response(422, "invalid_parameter", message, request, detail=detail)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(exc.status_code, code, str(exc.detail), request)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s", request.url.path)
        return error_response(500, "internal_error", "internal server error", request)
