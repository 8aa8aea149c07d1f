"""Pure ASGI middleware: body-size limit while streaming, request metrics and access log.

The body limit is enforced on the bytes as they arrive, before anything is buffered: a
declared Content-Length over the limit is refused at once, and a chunked body is cut off
the moment it crosses the limit (the app then sees a disconnect and stops).
"""

from __future__ import annotations

import json
import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.metrics import Metrics

access_log = logging.getLogger("campusguard.access")
KNOWN_ROUTES = ("/detect/batch", "/detect", "/v1/vision/detection", "/health/live", "/health/ready", "/health",
                "/metrics", "/events", "/admin/reload", "/docs", "/openapi.json")


def route_label(path: str) -> str:
    """Bounded label set: a known route, or 'other' (scanners must not blow up cardinality)."""
    if path in KNOWN_ROUTES:
        return path
    if path.startswith("/events/"):
        return "/events/{id}"
    return "other"


class RequestGuard:
    def __init__(self, app: ASGIApp, max_body_bytes: int, metrics: Metrics) -> None:
        self.app = app
        self.max_body = max_body_bytes
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        route = route_label(scope["path"])
        state = {"status": 500, "responded": False, "cut": False}
        scope.setdefault("state", {})

        async def guarded_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                if state["cut"]:
                    return  # we already answered 413
                state["status"] = message["status"]
                state["responded"] = True
            elif state["cut"]:
                return
            await send(message)

        declared = _content_length(scope)
        if declared is not None and declared > self.max_body:
            await self._refuse(send, state, declared)
        else:
            received = 0

            async def limited_receive() -> Message:
                nonlocal received
                if state["cut"]:
                    return {"type": "http.disconnect"}
                message = await receive()
                if message["type"] == "http.request":
                    received += len(message.get("body", b""))
                    if received > self.max_body:
                        await self._refuse(send, state, received)
                        return {"type": "http.disconnect"}
                return message

            self.metrics.in_flight.inc()
            try:
                await self.app(scope, limited_receive, guarded_send)
            finally:
                self.metrics.in_flight.dec()
        elapsed = time.perf_counter() - start
        self.metrics.requests.labels(route, str(state["status"])).inc()
        self.metrics.request_latency.labels(route).observe(elapsed)
        extra = scope["state"]
        access_log.info(
            "%s %s %s %.1fms", scope["method"], scope["path"], state["status"], elapsed * 1e3,
            extra={"route": route, "status": state["status"], "latency_ms": round(elapsed * 1e3, 2),
                   "method": scope["method"], "camera_id": extra.get("camera_id"),
                   "detections": extra.get("detections")},
        )

    async def _refuse(self, send: Send, state: dict, size: int) -> None:
        if state["responded"]:
            state["cut"] = True
            return
        state["cut"], state["status"], state["responded"] = True, 413, True
        self.metrics.rejected.labels("payload_too_large").inc()
        body = json.dumps({"error": "payload_too_large",
                           "message": f"request body exceeds the limit of {self.max_body} bytes"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


def _content_length(scope: Scope) -> int | None:
    for key, value in scope.get("headers", ()):
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
