"""Per-address throttling of failed logins: a brute-force attempt is slowed to a crawl.

After ``max_failures`` wrong keys from one client address within ``window_s``, that address
is refused (429 with Retry-After) for ``block_s``, whatever key it sends, so trying keys costs
``block_s`` per ``max_failures`` guesses; every other address is served as before. Only
wrong keys count: a missing key (a console's first visit) and a valid key with too small a
role are not guesses. The table is bounded (``max_addresses``, least recently seen
forgotten first), so a flood from many addresses cannot grow memory without limit.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ThrottleOptions:
    max_failures: int = 10
    window_s: float = 60.0
    block_s: float = 300.0  # 0: count, never refuse
    max_addresses: int = 10_000


class Throttle(Protocol):
    """What the gate asks of the failed-key table: all the state it keeps lives behind these calls.

    Several front-end processes behind one port (the GPU node, issue 40) must share one table,
    or an attacker spreads guesses over the processes: they share it by being handed one object
    that implements this (one in-process ``FailureThrottle`` for threads; a shared one, e.g. in
    shared memory or the event store, for processes), never by each keeping its own."""

    @property
    def options(self) -> ThrottleOptions: ...

    def blocked_for(self, address: str) -> float: ...

    def failed(self, address: str) -> float: ...


@dataclass(slots=True)
class _Address:
    failures: deque[float] = field(default_factory=deque)
    blocked_until: float = 0.0


class FailureThrottle:
    """Thread-safe: requests of any thread report failures and ask before a key is checked."""

    def __init__(self, options: ThrottleOptions = ThrottleOptions(),
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.options = options
        self.clock = clock
        self._table: OrderedDict[str, _Address] = OrderedDict()
        self._lock = threading.Lock()

    def blocked_for(self, address: str) -> float:
        """Seconds this address is still refused (0: not blocked)."""
        with self._lock:
            entry = self._table.get(address)
            return max(0.0, entry.blocked_until - self.clock()) if entry is not None else 0.0

    def failed(self, address: str) -> float:
        """Record a wrong key from ``address``; the block's length if this failure started one, else 0."""
        now = self.clock()
        opts = self.options
        with self._lock:
            entry = self._table.pop(address, None) or _Address()
            self._table[address] = entry  # most recently seen last
            while len(self._table) > opts.max_addresses:
                self._table.popitem(last=False)
            entry.failures.append(now)
            while entry.failures and entry.failures[0] <= now - opts.window_s:
                entry.failures.popleft()
            if opts.block_s > 0 and len(entry.failures) >= opts.max_failures and entry.blocked_until <= now:
                entry.blocked_until = now + opts.block_s
                entry.failures.clear()
                return opts.block_s
        return 0.0

    def __len__(self) -> int:
        return len(self._table)
