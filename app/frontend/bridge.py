"""The owner's side: requests handed over by the front ends, run on the service's own ASGI app.

Each front end keeps a few Unix-socket connections to the owner and sends one request at a
time on each (``wire``): the head (method, path, query, headers, the client's address), then
the body only once the app asks for it. So what the app checks before it reads the body
(auth, the failed-key throttle, admission with 503 + Retry-After, the capture time) runs
before a byte of the upload crosses, exactly as in one process, and by the same code: the
owner does not parse HTTP, and a front end decides nothing.

A front end that can read a ``POST /detect`` itself (app/frontend/compact.py) sends a
compact ``frame`` head instead: the owner's ``frames`` handler (app/wiring/compact.py) answers
it without the ASGI app, over a ``FrameLink`` (the same pull before the body, then the image's
bytes, then a compact ``result`` the front end turns into the JSON reply). ``hello`` asks for
what the front end needs for that (the keys, the body limits); without a handler the answer
says "no compact frames" and every request takes the ASGI path.

Messages, front end -> owner: ``head``; ``body`` (raw bytes, ``more``) after the owner's
``pull``; the front end closes the connection when the client went away. Owner -> front end:
``pull``, ``start`` (status, headers), ``body`` (raw bytes, ``more``: a streamed reply sends
many), the last with more false and ``keep`` (false: the owner closes this connection, e.g.
after a reply that listened for the client leaving, as its read of it may still be pending).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, MutableMapping
from contextlib import suppress
from typing import Any, Protocol

from app.frontend.sequencer import CameraSequencer, camera_of
from app.frontend.series import FrontendSeries
from app.frontend.wire import read_message, write_message

log = logging.getLogger("campusguard.frontend")
ASGIApp = Callable[[MutableMapping[str, Any], Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]],
                   Awaitable[None]]


class FrameLink:
    """The owner's side of one compact frame on one connection (what a ``FrameHandler`` answers over)."""

    def __init__(self, head: dict[str, Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.head, self.reader, self.writer = head, reader, writer
        self.pulled = False

    async def reply(self, status: int, headers: list[tuple[bytes, bytes]], body: bytes) -> None:
        """A whole reply the owner made (a refusal, an error): the front end relays it as it is."""
        await write_message(self.writer, {"t": "start", "status": status,
                                          "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in headers]})
        await write_message(self.writer, {"t": "body", "more": False, "keep": True}, body)

    async def pull(self) -> tuple[dict[str, Any], bytes]:
        """Ask for the body; the answer: ``image`` (its bytes), ``cut`` (over the limit, too slow:
        ``reason``) or ``replay`` (the front end sends the request down the ASGI path instead)."""
        self.pulled = True
        await write_message(self.writer, {"t": "pull"})
        return await read_message(self.reader)

    async def send(self, header: dict[str, Any]) -> None:
        """``result`` (the front end shapes the reply) or ``keys`` (its keys are stale: it checks again)."""
        await write_message(self.writer, header)


class FrameHandler(Protocol):
    """The owner's compact-frame path (app/wiring/compact.py)."""

    def config(self) -> dict[str, Any]:
        """What a front end needs to send compact frames (``hello``'s answer)."""
        ...

    async def __call__(self, link: FrameLink) -> str:
        """Answer one frame: ``done``, ``replay`` (not counted: the request comes again),
        ``rekey`` (same) or ``closed`` (the connection is out of step)."""
        ...


class NoCompactFrames:
    """The owner without a compact path: ``hello`` says so, and a ``frame`` head is out of step."""

    def config(self) -> dict[str, Any]:
        return {}

    async def __call__(self, link: FrameLink) -> str:
        log.warning("front-end connection sent a compact frame to an owner without the path: closed")
        return "closed"


class Bridge:
    """Serves the front ends' connections on ``path`` for ``app`` (the owner's event loop), and
    their compact frames for ``frames`` (``NoCompactFrames``: every request on the ASGI path)."""

    def __init__(self, app: ASGIApp, path: str, series: FrontendSeries,
                 frames: FrameHandler = NoCompactFrames()) -> None:  # noqa: B008 - stateless
        self.app, self.path, self.series, self.frames = app, path, series, frames
        self.sequencer = CameraSequencer()
        self._server: asyncio.AbstractServer | None = None
        self._connections: set[asyncio.Task[Any]] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(self._connection, path=self.path, limit=1 << 20)

    async def stop(self) -> None:
        """No new connections; the open ones (idle in the front ends' pools by now) closed."""
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One front-end connection: requests one after another until it closes."""
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            while True:
                try:
                    head, _ = await read_message(reader)
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                kind = head.get("t")
                if kind == "hello":
                    await write_message(writer, {"t": "config"} | self.frames.config())
                    continue
                if kind == "frame":
                    if not await self._frame(head, reader, writer):
                        return
                    continue
                if kind != "head":
                    log.warning("front-end connection out of step (%s): closed", kind)
                    return
                if not await Exchange(self, head, reader, writer).run():
                    return  # the client went away mid-request: this connection's stream is not reusable
        except asyncio.CancelledError:
            return  # stop(): the owner is shutting down
        finally:
            self._connections.discard(task)
            writer.close()

    async def _frame(self, head: dict[str, Any], reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """One compact frame, in its camera's turn; True when the connection can carry the next request."""
        try:
            async with self.sequencer.turn(head.get("camera")):
                outcome = await self.frames(FrameLink(head, reader, writer))
        except (asyncio.IncompleteReadError, ConnectionError):
            outcome = "closed"
        if outcome in ("done", "closed"):
            self.series.requests.labels(str(head.get("fe", "?"))).inc()
        return outcome != "closed"


class Exchange:
    """One request on one connection: the ASGI receive/send of the owner's app over the wire."""

    def __init__(self, bridge: Bridge, head: dict[str, Any], reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.bridge, self.head, self.reader, self.writer = bridge, head, reader, writer
        self.pulled = False
        self.body_done = False
        self.started = False
        self.finished = False
        self.gone = False
        self.waiting = False  # the app listens for the client leaving (a streamed reply): not reusable after

    def scope(self) -> dict[str, Any]:
        h = self.head
        client = h.get("client")
        server = h.get("server")
        return {"type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"}, "http_version": h["http_version"],
                "method": h["method"], "scheme": h["scheme"], "path": h["path"],
                "raw_path": h["path"].encode("latin-1"), "root_path": "",
                "query_string": h["query"].encode("latin-1"),
                "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in h["headers"]],
                "client": tuple(client) if client else None, "server": tuple(server) if server else None,
                "state": {}}

    async def run(self) -> bool:
        """Run the request; True when the connection can carry the next one."""
        h = self.head
        self.bridge.series.requests.labels(str(h.get("fe", "?"))).inc()
        camera = camera_of(h["method"], h["path"], h["query"].encode("latin-1"))
        try:
            async with self.bridge.sequencer.turn(camera):
                await self.bridge.app(self.scope(), self.receive, self.send)
        except Exception:
            log.exception("front-end request %s %s failed in the owner", h["method"], h["path"])
            if not self.finished and not self.gone:
                await self._error()
        if not self.finished and not self.gone:
            await self._error()
        if self.gone:
            return False
        # the app answered without reading the whole body (a 413, a refusal): the front end stops
        # sending it and closes this connection rather than skip the rest
        return not (self.pulled and not self.body_done) and not self.waiting

    async def receive(self) -> dict[str, Any]:
        if self.gone or self.body_done or self.finished:
            if not (self.gone or self.finished):
                await self._wait_gone()
            return {"type": "http.disconnect"}
        if not self.pulled:
            self.pulled = True
            await write_message(self.writer, {"t": "pull"})
        try:
            message, data = await read_message(self.reader)
        except (asyncio.IncompleteReadError, ConnectionError):
            self.gone = True
            return {"type": "http.disconnect"}
        if message.get("t") != "body":
            self.gone = True
            return {"type": "http.disconnect"}
        more = bool(message.get("more"))
        self.body_done = not more
        return {"type": "http.request", "body": data, "more_body": more}

    async def _wait_gone(self) -> None:
        """After the whole body: a streamed reply's receive() waits until the client leaves (the
        front end closes the connection) or the reply ends (then it is cancelled)."""
        self.waiting = True
        try:
            message, _ = await read_message(self.reader)
        except (asyncio.IncompleteReadError, ConnectionError):
            message = {"t": "gone"}
        self.gone = True
        if message.get("t") != "gone":  # nothing may come mid-request
            log.warning("front-end connection out of step (%s mid-request)", message.get("t"))

    async def send(self, message: dict[str, Any]) -> None:
        """A reply message to the front end; after the client left, dropped silently (as uvicorn
        does in one process: the app finishes, nobody reads the answer)."""
        if self.gone:
            return
        kind = message["type"]
        try:
            if kind == "http.response.start":
                headers = [[k.decode("latin-1"), v.decode("latin-1")] for k, v in message.get("headers", ())]
                await write_message(self.writer, {"t": "start", "status": message["status"], "headers": headers})
                self.started = True
            elif kind == "http.response.body":
                more = bool(message.get("more_body"))
                header = {"t": "body", "more": more} if more else {"t": "body", "more": False, "keep": not self.waiting}
                self.finished = not more
                await write_message(self.writer, header, message.get("body", b""))
        except ConnectionError:
            self.gone = True

    async def _error(self) -> None:
        """The app ended without a whole reply: a 500 in the service's shape (or the end of a started one)."""
        with suppress(ConnectionError):
            if self.started:  # a reply cut short: end it
                await write_message(self.writer, {"t": "body", "more": False})
            else:
                body = b'{"error":"internal_error","message":"internal server error"}'
                await write_message(self.writer, {"t": "start", "status": 500,
                                                  "headers": [["content-type", "application/json"]]})
                await write_message(self.writer, {"t": "body", "more": False}, body)
            self.finished = True
