"""API documentation: /openapi.json, Swagger UI at /docs and ReDoc at /redoc, all offline.

FastAPI's built-in pages load their JavaScript from a public CDN, so on a site network
without internet they are blank. The pages here point at the Swagger UI / ReDoc bundles
that the ``fastapi-offline`` package ships, served by this app under ``STATIC_URL``. The
three document routes need a key when keys are set (unless listed in ``public_routes``);
the static bundles are generic library files and always open.
"""

from __future__ import annotations

from pathlib import Path

import fastapi_offline
from fastapi import APIRouter, FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from app.api.deps import Read

ASSETS = Path(fastapi_offline.__file__).parent / "static"
STATIC_URL = "/docs/static"
router = APIRouter(dependencies=[Read], include_in_schema=False)


@router.get("/openapi.json")
async def openapi(request: Request) -> JSONResponse:
    return JSONResponse(request.app.openapi())


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return get_swagger_ui_html(
        openapi_url=f"{root}/openapi.json", title=f"{request.app.title} - Swagger UI",
        swagger_js_url=f"{root}{STATIC_URL}/swagger-ui-bundle.js", swagger_css_url=f"{root}{STATIC_URL}/swagger-ui.css",
        swagger_favicon_url=f"{root}{STATIC_URL}/favicon.png", oauth2_redirect_url=None,
        swagger_ui_parameters={"persistAuthorization": True})


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    root = request.scope.get("root_path", "")
    return get_redoc_html(openapi_url=f"{root}/openapi.json", title=f"{request.app.title} - ReDoc",
                          redoc_js_url=f"{root}{STATIC_URL}/redoc.standalone.js",
                          redoc_favicon_url=f"{root}{STATIC_URL}/favicon.png", with_google_fonts=False)


def install_docs(app: FastAPI) -> None:
    """Mount the offline assets and the three document routes (the app is built with
    ``docs_url=redoc_url=openapi_url=None`` so FastAPI's CDN pages never exist)."""
    app.mount(STATIC_URL, StaticFiles(directory=ASSETS), name="docs-static")
    app.include_router(router)
