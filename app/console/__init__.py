"""The operator console: a static page at ``/ui`` (HTML, CSS and ES modules, no build step).

The files themselves hold no data and need no key; everything the page shows comes from the
documented JSON routes, which it calls with the key the user typed (``X-API-Key``), so the
server's roles stay the only authority. Served from package data so ``pip install .`` works
offline on a site network.
"""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import RedirectResponse
from fastapi.staticfiles import StaticFiles
from starlette.requests import Request

STATIC_DIR = Path(__file__).parent / "static"
MOUNT_PATH = "/ui"


def mount_console(app: FastAPI) -> None:
    """Serve the console at /ui and send a browser opening the bare host there."""
    app.mount(MOUNT_PATH, StaticFiles(directory=STATIC_DIR, html=True), name="console")
    # a plain Starlette route, not an API route: no JSON, no key, not in OpenAPI
    app.add_route("/", _to_console, include_in_schema=False)


async def _to_console(request: Request) -> RedirectResponse:
    return RedirectResponse(f"{MOUNT_PATH}/")
