"""Pure ASGI middleware: body-size limit and body-read timeout while streaming, request
metrics and access log.

The body limit is enforced on the bytes as they arrive, before anything is buffered: a
declared Content-Length over the limit is refused at once, and a chunked body is cut off
the moment it crosses the limit (the app then sees a disconnect and stops). A client that
sends its body slower than ``body_read_timeout_s`` allows gets 408 and loses the
connection, so slow uploads cannot hold connections and memory open.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.api.errors import error_body
from app.core.metrics import Metrics

access_log = logging.getLogger("campusguard.access")
DISCONNECT: Message = {"type": "http.disconnect"}


def route_label(scope: Scope) -> str:
    """Bounded label set: the template of the route the app's router matched
    ("/events/{event_id}"), or 'other' (scanners must not blow up cardinality; a body refused
    before routing counts there too). The router's own table decides, so there is no second
    list of routes to keep in step."""
    return getattr(scope.get("route"), "path", None) or "other"


DETECTION_TAGS = frozenset({"detection", "deepstack"})


def is_detection(scope: Scope) -> bool:
    """A request to a route that sends frames (its router's tags say so), for the recent-traffic window."""
    return bool(DETECTION_TAGS.intersection(getattr(scope.get("route"), "tags", None) or ()))


class RequestGuard:
    def __init__(self, app: ASGIApp, max_body_bytes: int, metrics: Metrics, body_read_timeout_s: float) -> None:
        self.app = app
        self.max_body = max_body_bytes
        self.metrics = metrics
        self.body_timeout = body_read_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        state = {"status": 500, "responded": False, "cut": False}
        scope.setdefault("state", {})

        async def guarded_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                if state["cut"]:
                    return  # we already answered 413 / 408
                state["status"] = message["status"]
                state["responded"] = True
            elif state["cut"]:
                return
            await send(message)

        declared = _content_length(scope)
        if declared is not None and declared > self.max_body:
            await self._refuse(scope, send, state, *self._too_large())
        else:
            received, body_done = 0, False
            deadline = start + self.body_timeout

            async def limited_receive() -> Message:
                nonlocal received, body_done
                if state["cut"]:
                    return DISCONNECT
                if body_done:  # after the body the app only listens for a disconnect: no deadline
                    return await receive()
                try:
                    message = await asyncio.wait_for(receive(), max(deadline - time.perf_counter(), 0.001))
                except asyncio.TimeoutError:
                    await self._refuse(scope, send, state, *too_slow(self.body_timeout))
                    return DISCONNECT
                if message["type"] == "http.request":
                    received += len(message.get("body", b""))
                    body_done = not message.get("more_body", False)
                    if received > self.max_body:
                        await self._refuse(scope, send, state, *self._too_large())
                        return DISCONNECT
                return message

            self.metrics.in_flight.inc()
            try:
                await self.app(scope, limited_receive, guarded_send)
            except Exception:
                # A bug. Starlette's ServerErrorMiddleware (outside this guard) answers 500 with the
                # app's handler and re-raises: counted and logged here first, or it is invisible.
                if not state["responded"]:
                    state["status"] = 500
                self._finished(scope, state, start)
                raise
            finally:
                self.metrics.in_flight.dec()
        self._finished(scope, state, start)

    def _finished(self, scope: Scope, state: dict, start: float) -> None:
        client = scope.get("client")
        record_request(self.metrics, scope["method"], scope["path"], route_label(scope), state["status"],
                       time.perf_counter() - start, scope["state"], client[0] if client else None,
                       is_detection(scope))

    def _too_large(self) -> tuple[int, str, str, str]:
        return too_large(self.max_body)

    async def _refuse(self, scope: Scope, send: Send, state: dict, status: int, code: str, reason: str,
                      message: str) -> None:
        if state["responded"]:
            state["cut"] = True
            return
        state["cut"], state["status"], state["responded"] = True, status, True
        status, headers, body = refusal(self.metrics, status, code, reason, message, scope["path"])
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def too_large(max_body: int) -> tuple[int, str, str, str]:
    """(status, code, reason, message) of a body over the limit."""
    return 413, "payload_too_large", "payload_too_large", f"request body exceeds the limit of {max_body} bytes"


def too_slow(timeout_s: float) -> tuple[int, str, str, str]:
    """(status, code, reason, message) of a body not received in time."""
    return 408, "request_timeout", "body_timeout", f"the request body was not received within {timeout_s:g} s"


def refusal(metrics: Metrics, status: int, code: str, reason: str, message: str,
            path: str) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """A body cut off (413 over the limit, 408 too slow): counted in ``rejected{reason}``; its
    reply closes the connection (the rest of the body is not read). A front end's compact frame
    (app/wiring/compact.py) is answered by the same function."""
    metrics.rejected.labels(reason).inc()
    status, payload = error_body(status, code, message, path)
    body = json.dumps(payload).encode()
    return status, [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                    (b"connection", b"close")], body


def record_request(metrics: Metrics, method: str, path: str, route: str, status: int, elapsed: float, extra: dict,
                   client: str | None, detection: bool) -> None:
    """One request's outcome: the request counter, the latency histogram, the recent window of
    detection routes and the access-log line (the guard's, and a front end's compact frame's)."""
    metrics.requests.labels(route, str(status)).inc()
    metrics.request_latency.labels(route).observe(elapsed)
    if detection:
        metrics.recent.observe(elapsed, extra.get("images", 0), status >= 500)
    principal = extra.get("principal")  # set by the auth check (app/api/access.py): a name, never a key
    access_log.info(
        "%s %s %s %.1fms", method, path, status, elapsed * 1e3,
        extra={"route": route, "status": status, "latency_ms": round(elapsed * 1e3, 2),
               "method": method, "camera_id": extra.get("camera_id"),
               "detections": extra.get("detections"), "key": getattr(principal, "name", None),
               "client": client},
    )


def _content_length(scope: Scope) -> int | None:
    for key, value in scope.get("headers", ()):
        if key == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None
    return None
