"""The front end's ASGI app: every request handed to the owner over a Unix socket.

The front end does the per-request work that needs no state: HTTP parsing (uvicorn),
reading the body off a slow client, writing the reply back (a streamed one chunk by chunk).
For every route but the compact frame (below) it decides nothing: the owner's app
authenticates, admits, detects and answers, so every route (console, events, admin, metrics)
keeps working and nothing stateful is split. The body
crosses only when the owner's app asks for it (``pull``), so a request refused before its
body is read (401, 429, 503 + Retry-After) never costs its upload's copy to the owner.

Connections to the owner are pooled (one request at a time on each, like HTTP/1.1
keep-alive); a connection whose exchange ended early (the client left, the reply came before
the whole body) is closed, never reused. When the owner cannot be reached the client gets
503 ``not_ready`` with Retry-After: the owner is starting or restarting.

A ``POST /detect`` the front end can read itself takes the compact path instead
(app/frontend/compact.py): the key, the query, the body's limits and the multipart are
handled here, the owner gets a small head and the image's bytes, and the JSON reply is made
here; the owner's steps and series stay the route's (app/wiring/compact.py).
"""

from __future__ import annotations

import asyncio
import logging
import time
from contextlib import suppress
from typing import Any

from app.frontend.compact import CompactPath, replay, reply_body
from app.frontend.wire import read_message, write_message

log = logging.getLogger("campusguard.frontend")
Connection = tuple[asyncio.StreamReader, asyncio.StreamWriter]
NOT_READY = b'{"error":"not_ready","message":"the service is starting or restarting; retry shortly"}'


class Proxy:
    """ASGI app of front end ``index``, handing requests to the owner listening on ``owner``."""

    def __init__(self, owner: str, index: int, max_idle: int = 64) -> None:
        self.owner, self.index, self.max_idle = owner, index, max_idle
        self._idle: list[Connection] = []
        self.compact = CompactPath(index)

    async def hello(self) -> None:
        """Ask the owner what the compact path needs (its keys, the body limits); without an
        answer every request is relayed whole."""
        try:
            reader, writer = await self._connect()
            await write_message(writer, {"t": "hello"})
            config, _ = await read_message(reader)
        except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
            log.warning("front end %d: no compact path (the owner did not answer: %s)", self.index, exc)
            return
        self._release(reader, writer, True)
        self.compact.configure(config)

    def _release(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reusable: bool) -> None:
        if reusable and len(self._idle) < self.max_idle:
            self._idle.append((reader, writer))
        else:
            writer.close()

    async def __call__(self, scope: dict[str, Any], receive, send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
        elif scope["type"] == "http":
            await self._http(scope, receive, send)

    async def _lifespan(self, receive, send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await self.hello()
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                for _, writer in self._idle:
                    writer.close()
                self._idle.clear()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _connect(self) -> Connection:
        while self._idle:
            reader, writer = self._idle.pop()
            if not writer.is_closing() and not reader.at_eof():
                return reader, writer
            writer.close()
        return await asyncio.open_unix_connection(self.owner, limit=1 << 20)

    def head(self, scope: dict[str, Any]) -> dict[str, Any]:
        return {"t": "head", "fe": self.index, "method": scope["method"], "path": scope["path"],
                "query": scope.get("query_string", b"").decode("latin-1"), "scheme": scope.get("scheme", "http"),
                "http_version": scope.get("http_version", "1.1"),
                "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]],
                "client": list(scope["client"]) if scope.get("client") else None,
                "server": list(scope["server"]) if scope.get("server") else None}

    async def _http(self, scope: dict[str, Any], receive, send) -> None:
        head = self.compact.plan(scope)
        if head is not None:
            await self._frame(scope, head, receive, send)
            return
        await self._relay(scope, receive, send)

    async def _frame(self, scope: dict[str, Any], head: dict[str, Any], receive, send) -> None:
        """A compact frame: the head, the owner's refusal or pull, the body, the result."""
        started = time.perf_counter()
        try:
            reader, writer = await self._connect()
        except OSError:
            await self._not_ready(send)
            return
        reusable = answered = False
        body: bytes | None = None
        try:
            while True:
                await write_message(writer, head)
                message, data = await read_message(reader)
                if message["t"] != "keys":
                    break
                self.compact.load_keys(message)  # the owner's keys changed: check this key again
                head = self.compact.recheck(head, scope)
            if message["t"] == "start":  # refused before the body (401, 429, 503, 422...)
                answered = True
                reusable = await self._reply(message, reader, send)
                return
            body, cut = await self.compact.read_body(receive, started)
            if body is None:
                if cut is not None:
                    await write_message(writer, {"t": "cut", "reason": cut})
                    message, _ = await read_message(reader)
                    answered = True
                    reusable = await self._reply(message, reader, send)
                return  # else the client left: the owner's connection closes
            image = await self.compact.image_of(scope, body)
            if image is None:
                await write_message(writer, {"t": "replay"})
                reusable = True
            else:
                await write_message(writer, {"t": "image"}, image)
                message, data = await read_message(reader)
                answered = True
                reusable = await self._result(message, reader, send)
        except (asyncio.IncompleteReadError, ConnectionError, OSError, ValueError):
            log.warning("front end %d: the owner dropped a compact POST %s", self.index, scope["path"])
            reusable = False
            if not answered:
                await self._not_ready(send)
                answered = True
        finally:
            self._release(reader, writer, reusable)
        if not answered and body is not None:  # replayed: the owner's app reads it as sent
            await self._relay(scope, replay(body, receive), send)

    async def _result(self, message: dict[str, Any], reader: asyncio.StreamReader, send) -> bool:
        """The owner's answer to the image: a compact result (the JSON reply made here) or a whole reply."""
        if message["t"] != "result":
            return await self._reply(message, reader, send)
        reply = reply_body(message)
        await send({"type": "http.response.start", "status": 200,
                    "headers": [(b"content-length", str(len(reply)).encode()), (b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": reply, "more_body": False})
        return True

    async def _reply(self, start: dict[str, Any], reader: asyncio.StreamReader, send) -> bool:
        """A whole reply the owner made (``start`` then its body); whether the connection is reusable."""
        await send({"type": "http.response.start", "status": start["status"],
                    "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in start["headers"]]})
        message, data = await read_message(reader)
        await send({"type": "http.response.body", "body": data, "more_body": False})
        return bool(message.get("keep", True))

    async def _relay(self, scope: dict[str, Any], receive, send) -> None:
        """The generic path: the request handed to the owner's ASGI app as it came."""
        try:
            reader, writer = await self._connect()
        except OSError:
            await self._not_ready(send)
            return
        exchange = _Exchange(receive, writer)
        started = reusable = False
        try:
            await write_message(writer, self.head(scope))
            while True:
                message, data = await read_message(reader)
                kind = message["t"]
                if kind == "pull":
                    exchange.pump()
                elif kind == "start":
                    started = True
                    await send({"type": "http.response.start", "status": message["status"],
                                "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in message["headers"]]})
                elif kind == "body":
                    more = bool(message["more"])
                    exchange.replied = not more
                    await send({"type": "http.response.body", "body": data, "more_body": more})
                    if not more:
                        reusable = bool(message.get("keep", True))
                        break
            reusable = reusable and exchange.clean()
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            if exchange.client_gone:
                return
            log.warning("front end %d: the owner dropped %s %s", self.index, scope["method"], scope["path"])
            if not started:
                await self._not_ready(send)
            else:
                with suppress(Exception):
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            exchange.stop()
            if reusable and len(self._idle) < self.max_idle:
                self._idle.append((reader, writer))
            else:
                writer.close()

    @staticmethod
    async def _not_ready(send) -> None:
        await send({"type": "http.response.start", "status": 503,
                    "headers": [(b"content-type", b"application/json"), (b"retry-after", b"1")]})
        await send({"type": "http.response.body", "body": NOT_READY, "more_body": False})


class _Exchange:
    """The client's side of one request: its body pumped to the owner once pulled, and its
    going away noticed (the owner's connection is closed then, which the owner's app sees as
    ``http.disconnect``)."""

    def __init__(self, receive, writer: asyncio.StreamWriter) -> None:
        self.receive, self.writer = receive, writer
        self.task: asyncio.Task[None] | None = None
        self.body_sent = False
        self.replied = False
        self.client_gone = False

    def pump(self) -> None:
        if self.task is None:
            self.task = asyncio.create_task(self._pump())

    async def _pump(self) -> None:
        with suppress(ConnectionError, OSError):
            await self._pump_body()

    async def _pump_body(self) -> None:
        while not self.body_sent:
            message = await self.receive()
            if message["type"] == "http.disconnect":
                self._gone()
                return
            more = bool(message.get("more_body"))
            await write_message(self.writer, {"t": "body", "more": more}, message.get("body", b""))
            self.body_sent = not more
        message = await self.receive()  # a streamed reply runs until the client leaves
        if message["type"] == "http.disconnect" and not self.replied:
            self._gone()

    def _gone(self) -> None:
        if not self.replied:
            self.client_gone = True
            self.writer.close()

    def clean(self) -> bool:
        """The connection carries nothing of this request any more: reusable."""
        return not self.client_gone and (self.task is None or self.body_sent)

    def stop(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()
