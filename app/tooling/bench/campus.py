"""A campus as load: N cameras at F frames/s each, the newest frame winning (issue 40).

A concurrency sweep (``campusguard loadtest``) keeps K requests in flight whatever the
server does, which is not what a campus sends. Cameras produce frames on a clock; the
gateway (``app/ingest/mailbox.py``) keeps at most one frame of a camera in flight, and a
frame produced while the previous one is still out replaces any older waiting frame. This
module does the same per camera: one thread per camera on its own ``http.client``
keep-alive connection posts the frame of tick k; when the answer comes back at tick j > k,
the frames of ticks k+1 .. j-1 are *superseded* (never sent) and the frame of tick j goes
at once, else the thread sleeps until tick k+1. Every frame is a raw ``image/jpeg`` body
with ``camera_id`` and ``timestamp`` (its capture time), as the gateway posts it
(``app/ingest/httpsink.py``).

The cameras are split over several processes (threads of one interpreter would contend
for its lock at hundreds of frames per second), each reporting its own CPU time so the
generator's cost is stated beside the server's. The server's CPU comes from its
``campusguard_process_cpu_seconds_total`` (plus ``campusguard_frontend_cpu_seconds_total``
with front-end processes) before and after.
"""

from __future__ import annotations

import http.client
import math
import resource
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote, urlsplit

from app.tooling.bench.stats import summarize

CPU_METRIC = "campusguard_process_cpu_seconds_total"
FRONTEND_CPU_METRIC = "campusguard_frontend_cpu_seconds_total"  # app/frontend/series.py


@dataclass(frozen=True)
class CampusPlan:
    """What to offer: ``cameras`` ids at ``fps`` each for ``seconds``, from ``processes`` processes."""

    url: str
    cameras: tuple[str, ...]
    fps: float
    seconds: float
    processes: int = 4
    api_key: str | None = None
    timeout_s: float = 30.0

    @property
    def offered_fps(self) -> float:
        return len(self.cameras) * self.fps


@dataclass
class Tally:
    """One camera's (or, summed, one process's) frames by outcome."""

    offered: int = 0
    sent: int = 0
    answered: int = 0
    superseded: int = 0
    refused: int = 0  # 503: admission or not ready (the gateway would wait and send its newest frame)
    failed: int = 0  # any other status, a socket error or a broken answer
    latencies_ms: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def add(self, other: Tally) -> None:
        for name in ("offered", "sent", "answered", "superseded", "refused", "failed"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.latencies_ms.extend(other.latencies_ms)
        self.errors.extend(other.errors[: max(0, 5 - len(self.errors))])


def camera_ids(count: int, prefix: str = "cam") -> tuple[str, ...]:
    """``cam-000`` .. : ids the site file of the run lists (``site_yaml``)."""
    width = max(3, len(str(count - 1)))
    return tuple(f"{prefix}-{k:0{width}d}" for k in range(count))


def site_yaml(cameras: Sequence[str]) -> str:
    """A site file listing ``cameras``, each with one zone over the frame and an intrusion rule,
    so every frame goes through tracking and a rule like a real camera's."""
    lines = ["version: 1", "site: campus load", "timezone: UTC", "cameras:"]
    for camera in cameras:
        lines += [f"  - id: {camera}", "    zones:", "      - name: grounds", "        kind: restricted",
                  "        polygon: [[0, 0], [1, 0], [1, 1], [0, 1]]",
                  "        rules:", "          - {type: intrusion, cooldown_s: 60}"]
    return "\n".join(lines) + "\n"


def ticks_between(start: float, now: float, fps: float) -> int:
    """The index of the newest tick at or before ``now`` (tick k is at ``start + k / fps``)."""
    return math.floor((now - start) * fps + 1e-9)


def run_camera(camera: str, frames: Sequence[bytes], plan: CampusPlan, start: float, stop: float,
               clock: Callable[[], float] = time.monotonic,
               sleep: Callable[[float], None] = time.sleep,
               post: Callable[[str, bytes], tuple[int, str]] | None = None) -> Tally:
    """One camera: post the frame of each tick, newest first, at most one in flight.

    ``post(camera, body) -> (status, error text)`` is the HTTP call (a keep-alive
    ``http.client`` connection by default); ``clock`` and ``sleep`` let a test drive time."""
    tally = Tally()
    connection = None
    if post is None:
        connection = Connection(plan.url, plan.api_key, plan.timeout_s)
        post = connection.post
    last_tick = max(0, math.ceil((stop - start) * plan.fps - 1e-9) - 1)
    tally.offered = last_tick + 1
    k = 0
    try:
        while k <= last_tick:
            due = start + k / plan.fps
            now = clock()
            if now < due:
                sleep(due - now)
            sent_at = clock()
            status, error = post(camera, frames[k % len(frames)])
            done = clock()
            tally.sent += 1
            if status == 200:
                tally.answered += 1
                tally.latencies_ms.append((done - sent_at) * 1e3)
            elif status == 503:
                tally.refused += 1
            else:
                tally.failed += 1
                if len(tally.errors) < 5:
                    tally.errors.append(error or f"HTTP {status}")
            newest = min(ticks_between(start, done, plan.fps), last_tick)
            if newest > k:
                tally.superseded += newest - k - 1
                k = newest
            else:
                k += 1
    finally:
        if connection is not None:
            connection.close()
    return tally


class Connection:
    """A keep-alive ``http.client`` connection posting raw JPEG frames to ``/detect``."""

    def __init__(self, url: str, api_key: str | None, timeout_s: float) -> None:
        address = urlsplit(url)
        if address.scheme not in ("http", "https") or not address.hostname:
            raise ValueError(f"the server's URL must be http(s)://host[:port], got {url!r}")
        factory = http.client.HTTPSConnection if address.scheme == "https" else http.client.HTTPConnection
        self.host, self.port, self.factory, self.timeout_s = address.hostname, address.port, factory, timeout_s
        self.path = address.path.rstrip("/") + "/detect"
        self.headers = {"Content-Type": "image/jpeg", **({"X-API-Key": api_key} if api_key else {})}
        self.connection: http.client.HTTPConnection | None = None

    def post(self, camera: str, body: bytes) -> tuple[int, str]:
        stamp = datetime.now(timezone.utc).isoformat(timespec="milliseconds")
        target = f"{self.path}?camera_id={quote(camera)}&timestamp={quote(stamp)}"
        try:
            if self.connection is None:
                self.connection = self.factory(self.host, self.port, timeout=self.timeout_s)
            self.connection.request("POST", target, body=body, headers=self.headers)
            response = self.connection.getresponse()
            text = response.read()
            if response.will_close:
                self.close()
            return response.status, "" if response.status == 200 else f"HTTP {response.status}: {text[:200]!r}"
        except (OSError, http.client.HTTPException) as exc:
            self.close()  # a new connection for the next frame, as the gateway reconnects
            return 0, f"{type(exc).__name__}: {exc}"

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None


def run_process(plan: CampusPlan, cameras: Sequence[str], frames: Sequence[bytes], start_wall: float) -> dict[str, Any]:
    """One generator process: a thread per camera, all on one clock; its tally and CPU seconds."""
    cpu0 = resource.getrusage(resource.RUSAGE_SELF)
    # the parent hands a wall-clock start so every process ticks together; each converts it once
    start = time.monotonic() + (start_wall - time.time())
    stop = start + plan.seconds
    tallies: list[Tally] = []
    lock = threading.Lock()

    def camera_thread(camera: str, phase: float) -> None:
        tally = run_camera(camera, frames, plan, start + phase, stop + phase)
        with lock:
            tallies.append(tally)

    # cameras start spread over one frame interval, as real cameras are not in phase
    threads = [threading.Thread(target=camera_thread, args=(c, (i / max(1, len(cameras))) / plan.fps), daemon=True)
               for i, c in enumerate(cameras)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = Tally()
    for tally in tallies:
        total.add(tally)
    cpu1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)
    return {"tally": total, "cpu_s": cpu}


def split(cameras: Sequence[str], parts: int) -> list[list[str]]:
    """Cameras dealt round-robin over ``parts`` processes (none empty)."""
    parts = max(1, min(parts, len(cameras)))
    return [list(cameras[k::parts]) for k in range(parts)]


def run_campus(plan: CampusPlan, frames: Sequence[bytes], lead_s: float = 1.0) -> dict[str, Any]:
    """Run the plan from ``plan.processes`` processes; the summed outcome, rates and CPU."""
    groups = split(plan.cameras, plan.processes)
    start_wall = time.time() + lead_s + 0.2 * len(groups)  # time for the processes to start
    with ProcessPoolExecutor(max_workers=len(groups)) as pool:
        futures = [pool.submit(run_process, plan, group, frames, start_wall) for group in groups]
        results = [f.result() for f in futures]
    total = Tally()
    for result in results:
        total.add(result["tally"])
    return summary(plan, total, [r["cpu_s"] for r in results])


def summary(plan: CampusPlan, total: Tally, generator_cpu_s: Sequence[float]) -> dict[str, Any]:
    lat = summarize(total.latencies_ms)
    seconds = plan.seconds
    return {
        "cameras": len(plan.cameras), "fps_per_camera": plan.fps, "offered_fps": plan.offered_fps,
        "seconds": seconds, "processes": len(generator_cpu_s),
        "offered": total.offered, "sent": total.sent, "answered": total.answered,
        "superseded": total.superseded, "refused": total.refused, "failed": total.failed,
        "answered_fps": total.answered / seconds if seconds else 0.0,
        "superseded_share": total.superseded / total.offered if total.offered else 0.0,
        "lat_p50_ms": lat.p50, "lat_p95_ms": lat.p95, "lat_p99_ms": lat.p99, "lat_mean_ms": lat.mean,
        "generator_cpu_s": sum(generator_cpu_s),
        "generator_cpu_ms_per_frame": 1e3 * sum(generator_cpu_s) / total.sent if total.sent else None,
        "first_errors": total.errors[:5],
    }


def server_cpu_seconds(metrics_text: str) -> float | None:
    """The service's own CPU seconds from a /metrics scrape (None when absent): the process's,
    plus its front-end processes' where it has them (CAMPUSGUARD_FRONTENDS)."""
    found = None
    for line in metrics_text.splitlines():
        if line.startswith((CPU_METRIC + " ", FRONTEND_CPU_METRIC + " ")):
            found = (found or 0.0) + float(line.split()[1])
    return found
