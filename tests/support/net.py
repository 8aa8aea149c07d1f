"""Loopback ports for the servers the tests start."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def ready_server(app: Any, name: str, ready_s: float = 180.0) -> Iterator[str]:
    """``app`` served by uvicorn on a thread on a free loopback port, with its lifespan, until
    ``/health/ready`` answers 200 (AssertionError if it dies or takes longer than ``ready_s``):
    its base URL; stopped when the block ends."""
    import httpx
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="on", log_level="warning",
                                           access_log=False))
    thread = threading.Thread(target=server.run, name=name, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + ready_s
        while not (server.started and httpx.get(f"{url}/health/ready").status_code == 200):
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not become ready"
            time.sleep(0.2)
        yield url
    finally:
        server.should_exit = True
        thread.join(30)
