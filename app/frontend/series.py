"""The front ends in the owner's registry: each series once, for the container as a whole.

A front end keeps no metrics of its own (``/metrics`` is one more request it hands to the
owner). What is about the front ends themselves is counted here, in the owner: the requests
each one handed over (``campusguard_frontend_requests_total{frontend}``, summing to the
owner's ``campusguard_requests_total``), their restarts, and their CPU, read from /proc for
the live ones plus what the reaped ones had used, so the container's CPU is the owner's
``campusguard_process_cpu_seconds_total`` plus ``campusguard_frontend_cpu_seconds_total``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable

from prometheus_client import Counter
from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from app.core.metrics import NAMESPACE, Metrics

TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def cpu_seconds_of(pid: int) -> float:
    """utime + stime of a live process (Linux /proc); 0 when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS  # fields 14 and 15 of proc(5), after "pid (comm)"


class FrontendSeries(Collector):
    """Counted by the owner: requests per front end, restarts, and the front ends' CPU."""

    @classmethod
    def of(cls, metrics: Metrics) -> FrontendSeries:
        return metrics.part(cls)

    def __init__(self, metrics: Metrics) -> None:
        r, ns = metrics.registry, NAMESPACE
        self.requests = Counter("frontend_requests", "Requests each front-end process handed to the owner",
                                ["frontend"], namespace=ns, registry=r)
        self.restarts = Counter("frontend_restarts", "Front-end processes restarted after they died",
                                namespace=ns, registry=r)
        self._pids: Callable[[], Iterable[int]] = tuple
        self._reaped_s = 0.0
        self._lock = threading.Lock()
        r.register(self)

    def follow(self, pids: Callable[[], Iterable[int]]) -> None:
        """Read the CPU of these processes (the launcher's live front ends) at each scrape."""
        self._pids = pids

    def reaped(self, cpu_s: float) -> None:
        """A front end exited having used ``cpu_s`` (its rusage): kept in the total."""
        with self._lock:
            self._reaped_s += cpu_s

    def collect(self) -> Iterable[CounterMetricFamily]:
        live = sum(cpu_seconds_of(pid) for pid in self._pids())
        with self._lock:
            total = live + self._reaped_s
        yield CounterMetricFamily(f"{NAMESPACE}_frontend_cpu_seconds",
                                  "CPU seconds of the front-end processes (add the owner's process_cpu_seconds)",
                                  value=total)

    def describe(self) -> Iterable[CounterMetricFamily]:
        return [CounterMetricFamily(f"{NAMESPACE}_frontend_cpu_seconds", "", value=0)]
