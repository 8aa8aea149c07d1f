"""Who the client is behind a proxy: the X-Forwarded-For address, only from a trusted proxy and
only when it is an IP address.

uvicorn's own ``proxy_headers`` replaces the socket peer with whatever text the header holds
(``<script>``, a fresh string per request), and the original peer is lost. The failed-key throttle,
the audit trail and the access log all key on that address, so a client that can choose it can
guess keys without limit, lock out another address and write its own text into the logs. This
ASGI layer runs uvicorn's parser (the trusted-proxy list, the right-to-left walk, X-Forwarded-Proto)
inside the app instead, keeps the peer, and puts back the peer when the header names no valid
address: the client is then always the peer or a canonical IP address, never the header's text.
``app.commands.serve`` turns uvicorn's own handling off so the header is read once, here.
"""

from __future__ import annotations

import ipaddress

from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

PEER = "campusguard.peer"  # the scope key that carries the socket peer past uvicorn's parser


def valid_address(host: str) -> str | None:
    """``host`` as a canonical IP address (one spelling per address, so one throttle entry), or
    None when it is no IP address or carries an IPv6 zone (``fe80::1%<any text>``)."""
    try:
        address = ipaddress.ip_address(host.strip())
    except ValueError:
        return None
    if isinstance(address, ipaddress.IPv6Address) and address.scope_id is not None:
        return None
    return str(address)


class ForwardedClient:
    """ASGI middleware: ``scope["client"]`` is the X-Forwarded-For client when the peer is one of
    ``trusted_hosts`` (CAMPUSGUARD_FORWARDED_ALLOW_IPS; uvicorn's syntax) and the header names a
    valid IP address; else the socket peer."""

    def __init__(self, app: ASGIApp, trusted_hosts: str) -> None:
        self.app = app
        self.proxy = ProxyHeadersMiddleware(self._checked, trusted_hosts=trusted_hosts)  # type: ignore[arg-type]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        scope[PEER] = scope.get("client")
        await self.proxy(scope, receive, send)  # type: ignore[arg-type]

    async def _checked(self, scope: Scope, receive: Receive, send: Send) -> None:
        peer, client = scope.pop(PEER, None), scope.get("client")
        if client is not None and client != peer:  # the header named it
            host = valid_address(str(client[0]))
            scope["client"] = (host, client[1]) if host is not None else peer
        await self.app(scope, receive, send)
