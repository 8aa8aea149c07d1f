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
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

STATIC_DIR = Path(__file__).parent / "static"
MOUNT_PATH = "/ui"


# Every script is an external ES module and every style is console.css, so the strictest policy
# costs nothing: no inline script or style, no other origin, no framing, no referrer (the key
# the user typed lives in sessionStorage; an injected script could read it). The app owns these
# headers; a proxy in front adds only HSTS (docs/deploy.md).
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; "
                               "media-src 'self' blob:; connect-src 'self'; base-uri 'none'; form-action 'self'; "
                               "frame-ancestors 'none'",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}


class WithSecurityHeaders:
    """ASGI wrapper: the console's security headers on every response of the wrapped app."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS.items():
                    headers[name] = value
            await send(message)

        await self.app(scope, receive, send_with_headers)


def mount_console(app: FastAPI) -> None:
    """Serve the console at /ui (with its security headers) and send a browser opening the bare host there."""
    app.mount(MOUNT_PATH, WithSecurityHeaders(StaticFiles(directory=STATIC_DIR, html=True)), name="console")
    # a plain Starlette route, not an API route: no JSON, no key, not in OpenAPI
    app.add_route("/", _to_console, include_in_schema=False)


async def _to_console(request: Request) -> RedirectResponse:
    return RedirectResponse(f"{MOUNT_PATH}/")
