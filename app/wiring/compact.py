"""The owner's compact frame path: a front end's ``POST /detect``, answered without the ASGI app.

With front-end processes (``CAMPUSGUARD_FRONTENDS`` > 1) a front end that could read a frame
request itself (app/frontend/compact.py: the query checked by the route's rules, the key
checked against the owner's keyring, a raw ``image/*`` body or a multipart ``image``) sends
the owner a compact ``frame`` head instead of the HTTP request. This module answers it with
the route's own parts, in the route's order, so the reply, the refusals and every series are
what one process gives:

1. the failed-key throttle and the key's outcome (``Gate.settle``: the owner keeps the one
   count across every front end), the permission, the key's cameras;
2. the model (``ModelRouter.choose``), its engine leased and checked for capacity (``flow_for``:
   503 + Retry-After), the classes, the capture time (``FrameFlow.admit``): all before the body
   is pulled, so a refused request never sends its upload;
3. the image's bytes (the front end read them off the client within the body limit and
   timeout and parsed the multipart), ``FrameFlow.run`` (detection, shadow, rules, counts);
4. a compact result (detections as arrays) the front end serializes as ``DetectResponse``.

The request's series (``campusguard_requests_total{route="/detect"}``, latency, in flight, the
recent window, the access log) are recorded here once, by the middleware's own function. A
request the front end cannot take whole (an anomaly in its multipart) is ``replay``\\ ed: the
front end sends it down the ASGI path, which answers and counts it, and nothing is counted here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from fastapi.encoders import jsonable_encoder

from app.api.access import OPEN
from app.api.deps import flow_for
from app.api.errors import error_body
from app.api.forwarded import ForwardedClient
from app.api.middleware import record_request, refusal, too_large, too_slow
from app.api.routes.detect import resolve_classes
from app.api.state import AppState
from app.core.errors import Forbidden, ServiceError
from app.core.framequery import TIMINGS, parse_timestamp
from app.core.roles import INVALID_KEY, Keyring, Principal
from app.frontend.bridge import FrameLink
from app.inference.pipeline import DetectParams

log = logging.getLogger("campusguard.frontend")
ROUTE = "/detect"


class CompactFrames:
    """The owner's ``FrameHandler`` (app/frontend/bridge.py) over the app's state."""

    def __init__(self, state: AppState, forwarded_allow_ips: str) -> None:
        self.state = state
        self._forwarded = ForwardedClient(_client_of, trusted_hosts=forwarded_allow_ips)  # type: ignore[arg-type]
        self._keyring: Keyring | None = None
        self._generation = 0

    def keys_generation(self) -> int:
        """Bumped whenever the keys in force change (the keys-file watcher swaps the keyring)."""
        keyring = self.state.gate.keyring
        if keyring is not self._keyring:
            self._keyring, self._generation = keyring, self._generation + 1
        return self._generation

    def config(self) -> dict[str, Any]:
        o = self.state.options
        return {"compact": True, "max_body": o.max_body_bytes, "body_timeout_s": o.body_read_timeout_s} | self.keys()

    def keys(self) -> dict[str, Any]:
        """The keyring in force for the front ends' checks (digests only; a private Unix socket)."""
        keyring, generation = self.state.gate.keyring, self.keys_generation()
        return {"kg": generation, "required": keyring.required,
                "entries": [[e.name, e.role, e.digest.hex(), list(e.cameras)] for e in keyring.entries]}

    async def __call__(self, link: FrameLink) -> str:
        head = link.head
        if head.get("kg") != self.keys_generation():
            await link.send({"t": "keys"} | self.keys())
            return "rekey"
        start = time.perf_counter()
        extra: dict[str, Any] = {"camera_id": head.get("camera")}
        client = await self._client(head)
        status = 500
        self.state.metrics.in_flight.inc()
        try:
            status = await self._frame(link, client, extra)
        finally:
            self.state.metrics.in_flight.dec()
            if status:
                record_request(self.state.metrics, "POST", ROUTE, ROUTE, status, time.perf_counter() - start, extra,
                               client, True)
        return "done" if status else "replay"

    async def _client(self, head: dict[str, Any]) -> str:
        """The client's address as ``ForwardedClient`` reads it (the peer, or a trusted proxy's X-Forwarded-For)."""
        peer = tuple(head["client"]) if head.get("client") else None
        if not head.get("fwd"):
            return peer[0] if peer else "unknown"
        scope: dict[str, Any] = {"type": "http", "client": peer, "scheme": "http",
                 "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in head["fwd"]]}
        await self._forwarded(scope, _nothing, _nothing)
        return scope["client"][0] if scope.get("client") else "unknown"

    async def _frame(self, link: FrameLink, client: str, extra: dict[str, Any]) -> int:
        """The route's steps; the reply's status (0: replayed, nothing to count)."""
        head, s = link.head, self.state
        camera, q = head.get("camera"), head["q"]
        try:
            principal = self._principal(head, client)
            extra["principal"] = principal
            name = s.models.choose(q.get("model"), camera)
            with flow_for(name, s.models, s.engine.get(), s.rules.get(), s.shadow.get(), s.metrics,
                          s.progress.phase, camera) as flow:
                o = s.options
                params = DetectParams(
                    conf=o.defaults.conf if q.get("conf") is None else q["conf"],
                    iou=o.defaults.iou if q.get("iou") is None else q["iou"],
                    max_det=o.defaults.max_det if q.get("max_det") is None else q["max_det"],
                    classes=resolve_classes(q.get("classes"), flow.engine.pipeline.detector.names, flow.model))
                if camera is not None and o.bind_frames_to_key_cameras:
                    principal.check_camera(camera)
                admitted = flow.admit(camera, parse_timestamp(head.get("ts")))
                message, data = await link.pull()
                if message.get("t") == "replay":
                    return 0
                if message.get("t") == "cut":
                    cut = too_large(o.max_body_bytes) if message["reason"] == "payload_too_large" \
                        else too_slow(o.body_read_timeout_s)
                    status, headers, body = refusal(s.metrics, *cut, ROUTE)
                    await link.reply(status, headers, body)
                    return status
                outcome = await flow.run(admitted, data, params, admitted.keep())
                result = outcome.result
                extra.update(detections=len(result.detections), images=1)
                det = flow.engine.pipeline.detector
                await link.send({
                    "t": "result", "width": result.width, "height": result.height,
                    "det": [[d.class_id, d.class_name, float(d.confidence), float(d.x1), float(d.y1), float(d.x2),
                             float(d.y2)] for d in result.detections],
                    "model": det.model_name, "backend": det.backend, "provider": det.provider, "device": o.device,
                    "camera_id": camera, "timings": [float(result.timings_ms[k]) for k in TIMINGS],
                    "events": jsonable_encoder(outcome.events) if outcome.events else []})
                return 200
        except ServiceError as exc:
            await link.reply(*error_reply(exc.status, exc.code, exc.message, exc.retry_after, exc.detail))
            return exc.status
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            raise  # the front end's connection broke: nothing to answer on it
        except Exception:
            log.exception("unhandled error on %s (a front end's compact frame)", ROUTE)
            await link.reply(*error_reply(500, "internal_error", "internal server error"))
            return 500

    def _principal(self, head: dict[str, Any], client: str) -> Principal:
        """The route's key check on the front end's outcome: ``ok`` (name, role, cameras),
        ``invalid`` (the wrong key's id) or ``missing``; the throttle counted here."""
        gate = self.state.gate
        keyring = gate.keyring
        if ROUTE in self.state.options.public_routes or not keyring.required:
            return OPEN
        verdict = head["auth"]

        def identify() -> Principal:
            if verdict[0] == "ok":
                return Principal(verdict[1], verdict[2], tuple(verdict[3]))
            if verdict[0] == "invalid":
                raise Forbidden(INVALID_KEY)
            return keyring.identify(None)  # 401 with the keyring's own message

        wrong = verdict[1] if verdict[0] == "invalid" else ""
        return gate.settle(client, f"POST {ROUTE}", identify, wrong, "detect")


def error_reply(status: int, code: str, message: str, retry_after: float | None = None,
                detail: list | None = None) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    """The reply ``error_response`` gives (app/api/errors.py), as status, headers and bytes."""
    status, payload = error_body(status, code, message, ROUTE, detail)
    body = json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode()
    headers = [(b"retry-after", str(max(1, round(retry_after))).encode())] if retry_after else []
    headers += [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]
    return status, headers, body


async def _client_of(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """``ForwardedClient``'s inner app here: the scope's client is all that is wanted of it."""


async def _nothing(*_: Any) -> Any:
    return None
