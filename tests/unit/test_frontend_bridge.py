"""The front end <-> owner bridge in one event loop: two ``Proxy`` front ends handing requests
to one ``Bridge`` over a real Unix socket, with a small ASGI app standing for the owner's.

What must hold (issue 40, item 2): one camera's frames run one at a time in the order the
owner received them, whichever front end carried them; a refusal before the body is read
(503 + Retry-After) reaches the client as it is and no body byte crosses; each request is
counted once, by the front end that carried it; a streamed reply streams; an owner that
cannot be reached is a 503 the client may retry.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from app.core.metrics import Metrics
from app.frontend.bridge import Bridge
from app.frontend.proxy import Proxy
from app.frontend.sequencer import CameraSequencer, camera_of
from app.frontend.series import FrontendSeries
from app.frontend.wire import read_message, write_message
from tests.support.asgi_client import Client


class OwnerApp:
    """Records what runs when; ``/detect`` reads the body and sleeps ``delays[body]`` seconds."""

    def __init__(self, delays: dict[bytes, float] | None = None) -> None:
        self.delays = delays or {}
        self.log: list[tuple[str, bytes]] = []
        self.pulled = 0

    async def __call__(self, scope: dict[str, Any], receive, send) -> None:
        path = scope["path"]
        if path == "/refuse":  # admission: refused before the body is read
            await send({"type": "http.response.start", "status": 503,
                        "headers": [(b"retry-after", b"2"), (b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": b'{"error":"queue_full"}'})
            return
        if path == "/stream":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            for part in (b"a", b"b", b"c"):
                await send({"type": "http.response.body", "body": part, "more_body": True})
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        body = b""
        while True:
            self.pulled += 1
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.log.append(("start", body))
        await asyncio.sleep(self.delays.get(body, 0.0))
        self.log.append(("end", body))
        client = scope["client"][0].encode()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"x-client", client)]})
        await send({"type": "http.response.body", "body": b"ok:" + body})


async def with_bridge(tmp_path: Path, app: OwnerApp, body) -> tuple[Metrics, Any]:
    metrics = Metrics()
    bridge = Bridge(app, str(tmp_path / "owner.sock"), FrontendSeries.of(metrics))
    await bridge.start()
    try:
        return metrics, await body(Proxy(bridge.path, 0), Proxy(bridge.path, 1))
    finally:
        await bridge.stop()


def test_one_cameras_frames_run_in_the_order_the_owner_received_them(tmp_path: Path) -> None:
    """Frame 1 (slow) through front end 0, frame 2 (fast) through front end 1 just after: frame
    2 waits for frame 1; without the owner's per-camera turn it would overtake it."""
    app = OwnerApp({b"frame-1": 0.3, b"frame-2": 0.0})

    async def scenario(fe0: Proxy, fe1: Proxy):
        first = asyncio.create_task(Client("POST", "/detect", b"camera_id=gate", b"frame-1").through(fe0))
        while not app.log:
            await asyncio.sleep(0.005)
        second = await Client("POST", "/detect", b"camera_id=gate", b"frame-2").through(fe1)
        return await first, second

    _, (first, second) = asyncio.run(with_bridge(tmp_path, app, scenario))
    assert (first.body, second.body) == (b"ok:frame-1", b"ok:frame-2")
    assert app.log == [("start", b"frame-1"), ("end", b"frame-1"), ("start", b"frame-2"), ("end", b"frame-2")]


def test_other_cameras_do_not_wait(tmp_path: Path) -> None:
    app = OwnerApp({b"slow": 0.3})

    async def scenario(fe0: Proxy, fe1: Proxy):
        slow = asyncio.create_task(Client("POST", "/detect", b"camera_id=a", b"slow").through(fe0))
        while not app.log:
            await asyncio.sleep(0.005)
        await Client("POST", "/detect", b"camera_id=b", b"fast").through(fe1)
        await slow

    asyncio.run(with_bridge(tmp_path, app, scenario))
    assert app.log.index(("end", b"fast")) < app.log.index(("end", b"slow"))


def test_a_refusal_before_the_body_crosses_as_it_is_and_pulls_no_body(tmp_path: Path) -> None:
    app = OwnerApp()

    async def scenario(fe0: Proxy, fe1: Proxy):
        return await Client("POST", "/refuse", b"camera_id=a", b"x" * 100_000).through(fe0)

    _, client = asyncio.run(with_bridge(tmp_path, app, scenario))
    assert client.status == 503 and client.headers[b"retry-after"] == b"2"
    assert client.read == 0  # the front end never read the upload
    assert client.body == b'{"error":"queue_full"}'


def test_bodies_in_chunks_the_client_address_and_one_count_per_request(tmp_path: Path) -> None:
    app = OwnerApp()
    payload = bytes(range(256)) * 2000

    async def scenario(fe0: Proxy, fe1: Proxy):
        out = []
        for index in range(6):  # pooled connections are reused between requests
            out.append(await Client("POST", "/detect", b"", payload, chunks=5).through((fe0, fe1)[index % 2]))
        return out

    metrics, clients = asyncio.run(with_bridge(tmp_path, app, scenario))
    assert all(c.status == 200 and c.body == b"ok:" + payload for c in clients)
    assert all(c.headers[b"x-client"] == b"10.1.2.3" for c in clients)  # the throttle sees the real client
    counted = {s.labels["frontend"]: s.value for s in metrics.registry.collect() for s in s.samples
               if s.name == "campusguard_frontend_requests_total"}
    assert counted == {"0": 3.0, "1": 3.0}


def test_a_client_that_leaves_mid_frame_costs_the_owner_nothing_but_that_frame(tmp_path: Path, caplog) -> None:
    """The owner's app finishes the frame and its reply is dropped, as in one process; nothing
    is logged as a failure, and the next request on that front end is served."""
    app = OwnerApp({b"slow": 0.2})

    async def scenario(fe0: Proxy, fe1: Proxy):
        leaving = Client("POST", "/detect", b"camera_id=a", b"slow")
        leaving.leaves_after_s = 0.05
        await leaving.through(fe0)
        await asyncio.sleep(0.3)  # the owner finishes the frame meanwhile
        return leaving, await Client("POST", "/detect", b"camera_id=a", b"next").through(fe0)

    _, (leaving, after) = asyncio.run(with_bridge(tmp_path, app, scenario))
    assert leaving.status is None  # nobody to answer
    assert ("end", b"slow") in app.log and after.body == b"ok:next"
    assert not [r for r in caplog.records if r.levelname in ("ERROR", "WARNING")]


def test_a_streamed_reply_streams(tmp_path: Path) -> None:
    async def scenario(fe0: Proxy, fe1: Proxy):
        return await Client("GET", "/stream").through(fe0)

    _, client = asyncio.run(with_bridge(tmp_path, OwnerApp(), scenario))
    assert client.status == 200 and client.body == b"abc" and client.sent_bodies == 4


def test_no_owner_is_a_503_to_retry(tmp_path: Path) -> None:
    client = asyncio.run(Client("GET", "/health/ready").through(Proxy(str(tmp_path / "none.sock"), 0)))
    assert client.status == 503 and client.headers[b"retry-after"] == b"1"
    assert b"not_ready" in client.body


def test_wire_keeps_bytes_as_they_are(tmp_path: Path) -> None:
    async def roundtrip() -> tuple[dict, bytes]:
        got: asyncio.Future = asyncio.get_running_loop().create_future()

        async def serve(reader, writer):
            got.set_result(await read_message(reader))
            writer.close()

        server = await asyncio.start_unix_server(serve, path=str(tmp_path / "w.sock"))
        _, writer = await asyncio.open_unix_connection(str(tmp_path / "w.sock"))
        await write_message(writer, {"t": "body", "more": False}, b"\x00\xff" * 1000)
        result = await got
        writer.close()
        server.close()
        return result

    header, body = asyncio.run(roundtrip())
    assert header == {"t": "body", "more": False} and body == b"\x00\xff" * 1000


@pytest.mark.parametrize(("method", "path", "query", "camera"), [
    ("POST", "/detect", b"camera_id=gate-1&conf=0.3", "gate-1"), ("POST", "/detect/batch", b"camera_id=x", "x"),
    ("POST", "/detect", b"conf=0.3", None), ("GET", "/detect", b"camera_id=x", None),
    ("POST", "/v1/vision/detection", b"camera_id=x", None)])
def test_which_requests_take_a_cameras_turn(method: str, path: str, query: bytes, camera: str | None) -> None:
    assert camera_of(method, path, query) == camera


def test_a_waiter_that_gives_up_lets_the_next_through() -> None:
    async def scenario() -> list[str]:
        sequencer, order = CameraSequencer(), []

        async def frame(name: str, hold: float) -> None:
            async with sequencer.turn("c"):
                order.append(name)
                await asyncio.sleep(hold)

        first = asyncio.create_task(frame("1", 0.1))
        await asyncio.sleep(0.01)
        second = asyncio.create_task(frame("2", 0))
        third = asyncio.create_task(frame("3", 0))
        await asyncio.sleep(0.01)
        second.cancel()  # its client left while it waited
        await asyncio.gather(first, third, return_exceptions=True)
        assert sequencer.waiting("c") == 0
        return order

    assert asyncio.run(scenario()) == ["1", "3"]
