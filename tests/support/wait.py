"""Polling for something another thread or process does: the one ``wait_for`` of the suite."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(predicate: Callable[[], T], timeout: float = 30.0, step: float = 0.05) -> T:
    """Call ``predicate`` every ``step`` seconds until it returns something truthy, and return
    that; past ``timeout``, return its last (falsy) answer, so callers write
    ``assert wait_for(...), what_was_seen``. The timeout is a ceiling, never an assertion on speed."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(step)
