"""The front end's compact path for ``POST /detect``: the per-request work done here, not in the owner.

In one process every frame costs Starlette's routing, FastAPI's dependencies, the key check,
the multipart parser and pydantic's reply serialization, under the owner's interpreter lock.
With front ends, a ``POST /detect`` whose JSON reply is wanted is read here instead:

* the query is checked by the route's own rules (``compact_query``, app/core/framequery.py);
  a query the route might read otherwise is not taken (``plan`` answers None) and goes to the
  owner's app unchanged, which answers it with its own 422;
* the key is checked against the owner's keyring (sent over the owner's socket, digests only;
  the owner keeps the keys-file watcher, and a frame checked on keys older than the owner's is
  answered ``keys``: checked again on the new ones). The outcome travels in the frame's head
  and the owner counts wrong keys in its one throttle (app/wiring/compact.py);
* after the owner's ``pull`` (its refusals come before it), the body is read off the client
  within the body limit and timeout (a cut is reported to the owner, which answers and counts
  it), and a multipart body is parsed by Starlette's parser as the route's is; anything but one
  ``image`` file (or an empty raw body) is replayed down the ASGI path with the bytes read;
* the owner's compact result becomes the ``DetectResponse`` JSON here (``reply_body``).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.datastructures import UploadFile
from starlette.requests import Request

from app.core.errors import Forbidden, Unauthorized
from app.core.framequery import RAW_TYPES, TIMINGS, compact_query, prefers_jpeg
from app.core.roles import KeyEntry, Keyring, key_id

ROUTE = "/detect"
MAX_FORM_FIELDS = 32  # as app/api/images.py reads a form
FORWARDED = (b"x-forwarded-for", b"x-forwarded-proto")
Receive = Callable[[], Awaitable[dict[str, Any]]]


class CompactPath:
    """What front end ``index`` needs to take frames itself: the owner's answer to ``hello``."""

    def __init__(self, index: int) -> None:
        self.index = index
        self.ready = False
        self.max_body = 0
        self.body_timeout_s = 30.0
        self.keyring = Keyring()
        self.generation = -1

    def configure(self, config: dict[str, Any]) -> None:
        """The owner's ``config`` (no ``compact``: an owner without the path, every request relayed)."""
        if not config.get("compact"):
            return
        self.max_body, self.body_timeout_s = int(config["max_body"]), float(config["body_timeout_s"])
        self.load_keys(config)
        self.ready = True

    def load_keys(self, message: dict[str, Any]) -> None:
        entries = tuple(KeyEntry(name, role, bytes.fromhex(digest), tuple(cameras))
                        for name, role, digest, cameras in message["entries"])
        self.keyring, self.generation = Keyring(entries, required=bool(message["required"])), int(message["kg"])

    def plan(self, scope: dict[str, Any]) -> dict[str, Any] | None:
        """The compact head of this request, or None when it takes the ASGI path."""
        if not self.ready or scope["method"] != "POST" or scope["path"] != ROUTE:
            return None
        headers: dict[bytes, bytes] = {}
        forwarded: list[list[str]] = []
        for name, value in scope["headers"]:
            headers.setdefault(name, value)  # the first, as Starlette's Headers.get reads it
            if name in FORWARDED:
                forwarded.append([name.decode("latin-1"), value.decode("latin-1")])
        content_type = headers.get(b"content-type", b"").decode("latin-1").lower()
        if not content_type.startswith(("multipart/form-data", *RAW_TYPES)):
            return None
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body):
            return None  # the owner's request guard refuses it before routing, as in one process
        if prefers_jpeg(headers.get(b"accept", b"").decode("latin-1"), False):
            return None
        query = compact_query(scope.get("query_string", b"").decode("latin-1"))
        if query is None:
            return None
        key = headers.get(b"x-api-key")
        client = scope.get("client")
        return {"t": "frame", "fe": self.index, "kg": self.generation,
                "auth": self.verdict(key.decode("latin-1") if key is not None else None),
                "client": list(client) if client else None, "fwd": forwarded, "camera": query.camera_id,
                "ts": query.timestamp, "q": {"conf": query.conf, "iou": query.iou, "max_det": query.max_det,
                                             "classes": query.classes, "model": query.model}}

    def verdict(self, supplied: str | None) -> list[Any]:
        """The key's outcome on the keyring (``identify``): ok (who), invalid (its id) or missing."""
        try:
            principal = self.keyring.identify(supplied or None)
        except Unauthorized:
            return ["missing"]
        except Forbidden:
            return ["invalid", key_id(supplied or "")]
        return ["ok", principal.name, principal.role, list(principal.cameras)]

    def recheck(self, head: dict[str, Any], scope: dict[str, Any]) -> dict[str, Any]:
        """The head again after new keys came (the query is unchanged)."""
        fresh = self.plan(scope)
        assert fresh is not None
        return fresh | {"fe": head["fe"]}

    async def read_body(self, receive: Receive, started: float) -> tuple[bytes | None, str | None]:
        """The whole body, or (None, the refusal's reason) over the limit or past the timeout
        (counted from the request's start, as the request guard does), or (None, None) when the
        client left."""
        parts: list[bytes] = []
        received = 0
        deadline = started + self.body_timeout_s
        while True:
            try:
                message = await asyncio.wait_for(receive(), max(deadline - time.perf_counter(), 0.001))
            except asyncio.TimeoutError:
                return None, "body_timeout"
            if message["type"] == "http.disconnect":
                return None, None
            chunk = message.get("body", b"")
            received += len(chunk)
            if received > self.max_body:
                return None, "payload_too_large"
            parts.append(chunk)
            if not message.get("more_body"):
                return b"".join(parts), None

    async def image_of(self, scope: dict[str, Any], body: bytes) -> bytes | None:
        """The frame's bytes: a raw body as it is, a form's one ``image`` file; None for anything
        the route would refuse or read otherwise (the request is then replayed to the owner's app)."""
        content_type = next((v for k, v in scope["headers"] if k == b"content-type"), b"").decode("latin-1").lower()
        if not content_type.startswith("multipart/form-data"):
            return body or None
        request = Request(scope, replay(body, None))
        try:
            form = await request.form(max_files=1, max_fields=MAX_FORM_FIELDS, max_part_size=self.max_body)
        except Exception:  # noqa: BLE001 - malformed, too many files...: the route's own message, on replay
            return None
        items = form.multi_items()
        images = [v for k, v in items if k == "image"]
        data = None
        if len(images) == 1 and isinstance(images[0], UploadFile):
            data = await images[0].read()
        for _, value in items:
            if isinstance(value, UploadFile):
                await value.close()
        return data


def replay(body: bytes, then: Receive | None) -> Receive:
    """An ASGI receive that gives ``body`` whole, then (``then``) the client's own receive."""
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        if then is not None:
            return await then()
        return {"type": "http.disconnect"}

    return receive


def reply_body(result: dict[str, Any]) -> bytes:
    """The owner's compact result as the route's ``DetectResponse`` JSON (its fields, in its
    order; encoded as Starlette's JSONResponse encodes)."""
    doc = {"width": result["width"], "height": result["height"],
           "detections": [{"class_id": c, "class_name": n, "confidence": p, "box": {"x1": x1, "y1": y1, "x2": x2,
                                                                                   "y2": y2}}
                          for c, n, p, x1, y1, x2, y2 in result["det"]],
           "model": result["model"], "backend": result["backend"], "provider": result["provider"],
           "device": result["device"], "camera_id": result["camera_id"],
           "timings": dict(zip(TIMINGS, result["timings"], strict=True)), "events": result["events"]}
    return json.dumps(doc, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
