"""One camera's frames, one at a time, in the order the owner received them.

In one process two frames of a camera posted concurrently still meet the camera's rules in
whatever order their detections finish. With front ends the owner receives them over
several connections, so it makes the order explicit: a frame of a camera waits for the
frames of that camera received before it (first come, first served, by arrival at the
owner), detections, rules and reply included. A camera sends one frame at a time anyway
(the gateway's mailbox keeps one in flight), so the wait costs nothing there; a client that
posts one camera's frames concurrently gets them answered in turn. Late frames (an older
capture time after a newer one) are clamped by the rules as in one process.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from urllib.parse import parse_qs

FRAME_ROUTES = frozenset({"/detect", "/detect/batch"})  # the routes that feed a camera's rules


def camera_of(method: str, path: str, query_string: bytes) -> str | None:
    """The camera whose rules a request feeds (a frame route's ``camera_id``), else None."""
    if method != "POST" or path not in FRAME_ROUTES or b"camera_id" not in query_string:
        return None
    values = parse_qs(query_string.decode("latin-1")).get("camera_id")
    return values[0] if values else None


class CameraSequencer:
    """Per camera a FIFO of waiters (the event loop's thread only); no entry for an idle camera."""

    def __init__(self) -> None:
        self._queues: dict[str, deque[asyncio.Future[None]]] = {}

    @asynccontextmanager
    async def turn(self, camera_id: str | None) -> AsyncIterator[None]:
        """Hold the camera's turn for the block (no camera: no wait)."""
        if camera_id is None:
            yield
            return
        queue = self._queues.setdefault(camera_id, deque())
        mine: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        queue.append(mine)
        try:
            while queue[0] is not mine:  # wait for the one just ahead (it leaves, or gives up, then the next)
                await asyncio.shield(queue[queue.index(mine) - 1])
            yield
        finally:
            queue.remove(mine)
            mine.set_result(None)
            if not queue:
                del self._queues[camera_id]

    def waiting(self, camera_id: str) -> int:
        return len(self._queues.get(camera_id, ()))
