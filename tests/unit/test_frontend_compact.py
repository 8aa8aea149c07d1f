"""The compact ``POST /detect`` path of the front ends against the route in one process.

Two ``Proxy`` front ends and the owner's ``Bridge`` with its ``CompactFrames`` run in one event
loop over a real Unix socket, on the production app (``inprocess_app``: fake detector, real
routes, middleware, gate and metrics). The same app answers the same requests through
``TestClient`` as one process does, and what must hold (issue 40, item 2) is checked against it:
the reply is the route's (JSON equal but for timings) and never ran the owner's ASGI app; bad
input gets the route's status and error code; wrong keys over both front ends trip the one
throttle at one process's count; a request refused before its body never sends it; one
camera's frames queue in the owner's turn; each series is counted once.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from app.api.state import state_of
from app.config import Settings
from app.core.roles import Keyring
from app.frontend.bridge import Bridge
from app.frontend.proxy import Proxy
from app.frontend.series import FrontendSeries
from app.wiring.compact import CompactFrames
from tests.support.asgi_client import Client
from tests.support.inprocess import IMGSZ, InProcess, inprocess_app

pytestmark = pytest.mark.timeout(60)
KEY, OTHER = "compact-test-key-0123456789", "compact-other-key-0123456789"


def jpeg(width: int = 96, height: int = 72) -> bytes:
    image = np.zeros((height, width, 3), np.uint8)
    image[20:50, 30:60] = (40, 180, 90)
    ok, buf = cv2.imencode(".jpg", image)
    assert ok
    return buf.tobytes()


FRAME = jpeg()


class Request(Client):
    """A client request with headers (X-API-Key, Content-Type...) as uvicorn hands it over."""

    def __init__(self, query: bytes, body: bytes, headers: dict[str, str], chunks: int = 1) -> None:
        super().__init__("POST", "/detect", query, body, chunks)
        self.scope["headers"] = [(k.lower().encode(), v.encode()) for k, v in headers.items()]


class CountingApp:
    """The owner's ASGI app, counting the requests that reached it (the compact path skips it)."""

    def __init__(self, app: Any) -> None:
        self.app, self.calls = app, 0

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] == "http":
            self.calls += 1
        await self.app(scope, receive, send)


@contextmanager
def owner(**settings: Any):
    base = dict(backend="torch", precision="fp32", imgsz=IMGSZ, threads=1, preprocess_workers=1, warmup_iters=0,
                api_keys=[KEY])
    with inprocess_app(Settings(**(base | settings))) as served:
        state_of(served.app).engine.put(served.engine)  # the owner's slot (the in-process app overrides a dependency)
        yield served


def through_frontends(tmp_path: Path, served: InProcess, scenario: Callable[..., Awaitable[Any]]) -> tuple[Any, int]:
    """``scenario(fe0, fe1, bridge)`` against the owner; its result and how many requests the ASGI app ran."""
    state = state_of(served.app)
    app = CountingApp(served.app)

    async def run() -> Any:
        bridge = Bridge(app, str(tmp_path / "owner.sock"), FrontendSeries.of(state.metrics),
                        CompactFrames(state, "127.0.0.1"))
        await bridge.start()
        fe0, fe1 = Proxy(bridge.path, 0), Proxy(bridge.path, 1)
        await fe0.hello()
        await fe1.hello()
        try:
            return await scenario(fe0, fe1, bridge)
        finally:
            await bridge.stop()

    return asyncio.run(run()), app.calls


def one_process(served: InProcess, query: str, body: bytes, headers: dict[str, str]) -> tuple[int, Any]:
    response = served.client.post(f"/detect?{query}", content=body, headers=headers)
    return response.status_code, response.json()


def multipart(data: bytes, field: str = "image", boundary: str = "b0undary") -> tuple[bytes, dict[str, str]]:
    body = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"{field}\"; filename=\"f.jpg\"\r\n"
            f"Content-Type: image/jpeg\r\n\r\n").encode() + data + f"\r\n--{boundary}--\r\n".encode()
    return body, {"Content-Type": f"multipart/form-data; boundary={boundary}", "X-API-Key": KEY}


def without_timings(doc: dict) -> dict:
    return {k: v for k, v in doc.items() if k != "timings"}


def samples(served: InProcess, name: str) -> dict[tuple, float]:
    return {tuple(sorted(s.labels.items())): s.value for m in state_of(served.app).metrics.registry.collect()
            for s in m.samples if s.name == name and s.value}


RAW = {"Content-Type": "image/jpeg", "X-API-Key": KEY}


@pytest.mark.parametrize("shape", ["raw", "multipart"])
def test_the_compact_reply_is_the_routes_and_skips_the_owners_app(tmp_path: Path, shape: str) -> None:
    query = "camera_id=gate-1&timestamp=2026-01-02T03:04:05Z&conf=0.3&iou=0.5&max_det=10&classes=person,car"
    body, headers = (FRAME, RAW) if shape == "raw" else multipart(FRAME)
    with owner() as served:
        status, single = one_process(served, query, body, headers)

        async def scenario(fe0: Proxy, fe1: Proxy, bridge: Bridge) -> list[Request]:
            return [await Request(query.encode(), body, headers).through(fe) for fe in (fe0, fe1)]

        clients, asgi_calls = through_frontends(tmp_path, served, scenario)
        counted = samples(served, "campusguard_requests_total")
    assert status == 200 and single["detections"], single
    for client in clients:
        assert client.status == 200 and client.headers[b"content-type"] == b"application/json"
        reply = json.loads(client.body)
        assert without_timings(reply) == without_timings(single)
        assert reply["timings"].keys() == single["timings"].keys()
    assert asgi_calls == 0  # no Starlette, no FastAPI in the owner for these frames
    assert counted[(("route", "/detect"), ("status", "200"))] == 3.0  # one process's 1 + the front ends' 2


def truncated() -> bytes:
    return FRAME[: len(FRAME) // 2]


BAD = [  # (query, body, headers): the route's answer is the reference
    ("camera_id=cam-1", b"", RAW),
    ("camera_id=cam-1", b"not an image at all", RAW),
    ("camera_id=cam-1", truncated(), RAW),
    ("camera_id=bad id!", FRAME, RAW),
    ("camera_id=cam-1&timestamp=yesterday", FRAME, RAW),
    ("camera_id=cam-1&timestamp=99999999999", FRAME, RAW),
    ("classes=person,unicorn", FRAME, RAW),
    ("classes=,,,", FRAME, RAW),
    ("conf=2", FRAME, RAW),
    ("max_det=0", FRAME, RAW),
    ("model=nope", FRAME, RAW),
    ("", FRAME, {"Content-Type": "image/jpeg", "X-API-Key": "wrong-key-0123456789"}),
    ("", FRAME, {"Content-Type": "image/jpeg"}),
    ("", FRAME, {"Content-Type": "text/plain", "X-API-Key": KEY}),
    ("", b"x" * 5000, {"Content-Type": "image/jpeg", "X-API-Key": KEY}),  # over the 4000-byte limit
    ("", multipart(FRAME, field="picture")[0], multipart(FRAME, field="picture")[1]),
    ("", b"--b0undary\r\ngarbage", multipart(FRAME)[1]),
]


@pytest.mark.parametrize(("query", "body", "headers"), BAD)
def test_bad_input_gets_the_routes_status_and_code(tmp_path: Path, query: str, body: bytes,
                                                   headers: dict[str, str]) -> None:
    with owner(max_body_bytes=4000) as served:
        status, single = one_process(served, query, body, headers)

        async def scenario(fe0: Proxy, fe1: Proxy, bridge: Bridge) -> Request:
            return await Request(query.encode(), body, headers, chunks=3).through(fe0)

        client, _ = through_frontends(tmp_path, served, scenario)
    assert status >= 400, single
    assert (client.status, json.loads(client.body)["error"]) == (status, single["error"])


def test_a_body_over_the_limit_without_a_length_is_cut_and_counted_once(tmp_path: Path) -> None:
    with owner(max_body_bytes=4000) as served:
        async def scenario(fe0: Proxy, fe1: Proxy, bridge: Bridge) -> Request:
            return await Request(b"camera_id=cam-1", b"x" * 9000, RAW, chunks=4).through(fe1)

        client, asgi_calls = through_frontends(tmp_path, served, scenario)
        rejected = samples(served, "campusguard_rejected_requests_total")
        counted = samples(served, "campusguard_requests_total")
    assert client.status == 413 and json.loads(client.body)["error"] == "payload_too_large"
    assert asgi_calls == 0 and client.headers[b"connection"] == b"close"
    assert rejected == {(("reason", "payload_too_large"),): 1.0}
    assert counted == {(("route", "/detect"), ("status", "413")): 1.0}


def test_wrong_keys_over_both_front_ends_trip_the_one_throttle(tmp_path: Path) -> None:
    """auth_fail_limit=3: three wrong keys, alternating front ends, then even the right key is a 429."""
    with owner(auth_fail_limit=3) as served:
        async def scenario(fe0: Proxy, fe1: Proxy, bridge: Bridge) -> list[int | None]:
            wrong = {"Content-Type": "image/jpeg", "X-API-Key": "wrong-key-0123456789"}
            out = [(await Request(b"", FRAME, wrong).through((fe0, fe1)[i % 2])).status for i in range(3)]
            blocked = await Request(b"", FRAME, RAW).through(fe1)
            assert b"retry-after" in blocked.headers and blocked.read == 0
            return [*out, blocked.status]

        statuses, asgi_calls = through_frontends(tmp_path, served, scenario)
    assert statuses == [403, 403, 403, 429]
    assert asgi_calls == 0


def test_a_refused_frame_never_sends_its_body(tmp_path: Path) -> None:
    """No engine yet (503 + Retry-After), a missing key (401): the front end never reads the upload."""
    with owner() as served:
        state_of(served.app).engine.put(None)

        async def scenario(fe0: Proxy, fe1: Proxy, bridge: Bridge) -> list[Request]:
            return [await Request(b"camera_id=cam-1", FRAME * 20, RAW).through(fe0),
                    await Request(b"camera_id=cam-1", FRAME * 20, {"Content-Type": "image/jpeg"}).through(fe1)]

        (not_ready, no_key), _ = through_frontends(tmp_path, served, scenario)
    assert not_ready.status == 503 and not_ready.headers[b"retry-after"]
    assert json.loads(not_ready.body)["error"] == "not_ready"
    assert no_key.status == 401
    assert not_ready.read == no_key.read == 0


def test_one_cameras_compact_frames_queue_in_the_owners_turn(tmp_path: Path) -> None:
    """Frame 2 of a camera (front end 1) waits in the camera's turn while frame 1 (front end 0)
    is in flight, and is answered after it; another camera's frame does not wait."""
    with owner() as served:
        engine = served.engine
        assert engine is not None
        gate = asyncio.Event()
        detect = engine.detect

        async def held(*args: Any, **kwargs: Any) -> Any:
            await gate.wait()
            return await detect(*args, **kwargs)

        engine.detect = held  # type: ignore[method-assign]

        async def scenario(fe0: Proxy, fe1: Proxy, bridge: Bridge) -> list[str]:
            done: list[str] = []

            async def frame(name: str, camera: bytes, fe: Proxy) -> None:
                client = await Request(b"camera_id=" + camera, FRAME, RAW).through(fe)
                assert client.status == 200
                done.append(name)

            first = asyncio.create_task(frame("1", b"gate", fe0))
            while bridge.sequencer.waiting("gate") < 1:
                await asyncio.sleep(0.005)
            second = asyncio.create_task(frame("2", b"gate", fe1))
            while bridge.sequencer.waiting("gate") < 2:
                await asyncio.sleep(0.005)
            other = asyncio.create_task(frame("other", b"yard", fe1))
            while bridge.sequencer.waiting("yard") < 1:
                await asyncio.sleep(0.005)
            gate.set()
            await asyncio.gather(first, second, other)
            return done

        done, _ = through_frontends(tmp_path, served, scenario)
    assert done.index("1") < done.index("2")


def test_new_keys_reach_the_front_ends_before_their_next_frame(tmp_path: Path) -> None:
    """The owner's keyring changes (the keys-file watcher): the front ends' next frame is checked
    on the new keys, so a removed key is refused and an added one accepted at once."""
    with owner() as served:
        gate = state_of(served.app).gate

        async def scenario(fe0: Proxy, fe1: Proxy, bridge: Bridge) -> list[int | None]:
            before = (await Request(b"", FRAME, RAW).through(fe0)).status
            gate.keys.keyring = Keyring.parse([OTHER])
            old = (await Request(b"", FRAME, RAW).through(fe0)).status
            new = (await Request(b"", FRAME, {"Content-Type": "image/jpeg", "X-API-Key": OTHER}).through(fe1)).status
            return [before, old, new]

        statuses, asgi_calls = through_frontends(tmp_path, served, scenario)
    assert statuses == [200, 403, 200] and asgi_calls == 0
