"""One HTTP request as uvicorn would hand it to an ASGI app, for the front-end tests: the body
arrives in ``chunks`` parts, the reply is collected, and the client stays until told otherwise."""

from __future__ import annotations

import asyncio
from typing import Any

from app.frontend.proxy import Proxy


class Client:
    """One HTTP request as uvicorn would hand it to a front end's app."""

    def __init__(self, method: str, path: str, query: bytes = b"", body: bytes = b"", chunks: int = 1) -> None:
        self.scope = {"type": "http", "method": method, "path": path, "query_string": query, "headers": [],
                      "client": ("10.1.2.3", 5555), "server": ("127.0.0.1", 8000), "scheme": "http",
                      "http_version": "1.1"}
        size = max(1, len(body) // chunks)
        parts = [body[i:i + size] for i in range(0, len(body), size)] or [b""]
        self.incoming = [{"type": "http.request", "body": p, "more_body": i < len(parts) - 1}
                         for i, p in enumerate(parts)]
        self.read = 0
        self.status: int | None = None
        self.headers: dict[bytes, bytes] = {}
        self.body = b""
        self.sent_bodies = 0

    leaves_after_s = 3600.0  # the client stays

    async def receive(self) -> dict[str, Any]:
        if self.read < len(self.incoming):
            self.read += 1
            return self.incoming[self.read - 1]
        await asyncio.sleep(self.leaves_after_s)
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status, self.headers = message["status"], dict(message["headers"])
        else:
            self.body += message.get("body", b"")
            self.sent_bodies += 1

    async def through(self, proxy: Proxy) -> Client:
        await proxy(self.scope, self.receive, self.send)
        return self
