"""A frame sink over a coroutine on an asyncio loop: the embedded hosting's bridge.

Inside ``campusguard serve`` the engine and the rules are async and live on uvicorn's loop,
while each camera's sender is a thread. ``AsyncSink(loop, feed)`` runs ``feed(frame)`` on
that loop and waits for it in the sender thread, so "one frame in flight per camera" holds
across the bridge and the engine's own admission (503 ``queue_full`` with a Retry-After)
becomes the sink's ``busy``. ``feed`` is the hosting's few lines: detect the frame, run
the camera's rules at ``frame.captured_at``, and return ``SinkResult.sent()``; it may also
raise an exception with a ``retry_after`` attribute (the service's 503 errors carry one),
which is answered as busy for that long.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
from collections.abc import Callable, Coroutine
from typing import Any

from app.ingest.frames import Frame
from app.ingest.mailbox import SinkResult

log = logging.getLogger(__name__)


class AsyncSink:
    """``FrameSink`` calling ``feed(frame)`` on ``loop``; answers busy on errors with ``retry_after``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, feed: Callable[[Frame], Coroutine[Any, Any, SinkResult]], *,
                 timeout_s: float = 30.0) -> None:
        self.loop, self.feed, self.timeout_s = loop, feed, timeout_s

    def __call__(self, frame: Frame) -> SinkResult:
        if self.loop.is_closed():
            return SinkResult.dropped("stopping")
        future = asyncio.run_coroutine_threadsafe(self.feed(frame), self.loop)
        try:
            return future.result(self.timeout_s)
        except concurrent.futures.TimeoutError:
            future.cancel()
            return SinkResult.busy(1.0, "engine_timeout")
        except concurrent.futures.CancelledError:
            return SinkResult.dropped("stopping")
        except Exception as exc:
            retry_after = getattr(exc, "retry_after", None)
            if retry_after is not None:
                return SinkResult.busy(float(retry_after), getattr(exc, "code", None) or "engine_busy")
            code = getattr(exc, "code", None)
            if code:  # a refusal of this frame (e.g. invalid_timestamp): drop it, keep going
                return SinkResult.dropped(str(code))
            log.exception("camera %s: frame feed failed", frame.camera_id)
            return SinkResult.dropped("sink_error")
