"""All cameras of one process: start, reconcile on a site reload, stop, report.

The same class serves both hostings; they differ only in the sink (``sink_for(camera_id)``)
and the frame format they ask for:

- embedded (``campusguard serve``): ``Supervisor(engine_sink, output=FrameFormat.RGB)``;
- gateway (``campusguard gateway``): ``Supervisor(http_sinks, output=FrameFormat.JPEG)``.

``update(sources)`` is the whole reload story: cameras that appeared start, cameras whose
source changed (or whose filled-in URL changed: a rotated password) restart, cameras that
disappeared stop (their ffmpeg killed and reaped before ``update`` returns). Every
``${VAR}`` is filled in first: one that is not set refuses the update and changes nothing.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from app.ingest.command import DEFAULT_MAX_PIXELS, ffmpeg_binary
from app.ingest.frames import FrameFormat
from app.ingest.mailbox import FrameSink, Sender
from app.ingest.source import Resolved, SourceError, SourceSpec, resolve_all
from app.ingest.states import CameraState, CameraStats, StateListener
from app.ingest.watchdog import STABLE_AFTER_S, CameraRunner

log = logging.getLogger(__name__)

DEFAULT_MAX_READERS = 64  # CAMPUSGUARD_INGEST_MAX_READERS: each reader is an ffmpeg of 50-200 MiB


def check_readers(count: int, max_readers: int) -> None:
    """SourceError when one process would pull more streams than ``max_readers``: a gateway's
    memory is sized for its cameras (docs/cameras.md), so more are refused, not squeezed in."""
    if count > max_readers:
        raise SourceError("cameras", f"{count} camera sources in this process, more than "
                                     f"CAMPUSGUARD_INGEST_MAX_READERS ({max_readers}): raise it (each reader is "
                                     "an ffmpeg of 50-200 MiB) or split the cameras over more gateways (--shard)")


SinkFactory = Callable[[str], FrameSink]
"""camera id -> the sink for that camera's frames (called once per camera start)."""


@dataclass(frozen=True)
class UpdateSummary:
    """What ``update`` did, for the reload's log line and answer."""

    started: tuple[str, ...] = ()
    restarted: tuple[str, ...] = ()
    stopped: tuple[str, ...] = ()


class _Camera:
    """A running camera: its resolved source, counters, reader thread and sender."""

    def __init__(self, camera_id: str, spec: SourceSpec, source: Resolved, sink: FrameSink, output: FrameFormat,
                 listener: StateListener | None, stable_after_s: float, max_pixels: int) -> None:
        self.spec, self.url = spec, source
        self.stats = CameraStats(camera_id, source.shown, spec.fps, listener)  # the template, redacted
        self.sender = Sender(camera_id, sink, self.stats)
        self.runner = CameraRunner(camera_id, spec, source, output, self.sender.offer, self.stats,
                                   stable_after_s=stable_after_s, max_pixels=max_pixels)

    def start(self) -> None:
        self.sender.start()
        self.runner.start()

    def request_stop(self) -> None:
        self.runner.request_stop()
        self.sender.request_stop()

    def join(self, deadline: float) -> None:
        self.runner.join(max(0.0, deadline - time.monotonic()))  # kills its ffmpeg even past the deadline
        self.sender.join(max(0.0, deadline - time.monotonic()))


class Supervisor:
    """The cameras this process pulls (thread-safe; ``stop`` is final)."""

    def __init__(self, sink_for: SinkFactory, *, output: FrameFormat = FrameFormat.JPEG,
                 listener: StateListener | None = None, environ: Mapping[str, str] | None = None,
                 secrets_dir: Path | None = None, stable_after_s: float = STABLE_AFTER_S,
                 max_pixels: int = DEFAULT_MAX_PIXELS, max_readers: int = DEFAULT_MAX_READERS) -> None:
        self.sink_for, self.output, self.listener = sink_for, output, listener
        self.environ = environ if environ is not None else os.environ
        self.secrets_dir = secrets_dir
        self.stable_after_s = stable_after_s
        self.max_pixels, self.max_readers = max_pixels, max_readers
        self._cameras: dict[str, _Camera] = {}
        self._lock = threading.Lock()
        self._stopped = False

    def start(self, sources: Mapping[str, SourceSpec]) -> UpdateSummary:
        """Start pulling ``sources`` (camera id -> spec). Raises ``FfmpegMissing`` without
        ffmpeg and ``SourceError`` (field named) when a ``${VAR}`` is not set."""
        ffmpeg_binary()
        return self.update(sources)

    def update(self, sources: Mapping[str, SourceSpec]) -> UpdateSummary:
        """Reconcile with ``sources``: start new cameras, restart changed ones, stop removed ones."""
        check_readers(len(sources), self.max_readers)
        urls = resolve_all(sources, self.environ, self.secrets_dir)  # raises before any change
        with self._lock:
            if self._stopped:
                raise RuntimeError("the supervisor is stopped")
            current = self._cameras
            removed = [cid for cid in current if cid not in sources]
            changed = [cid for cid in current if cid in sources
                       and (current[cid].spec, current[cid].url) != (sources[cid], urls[cid])]
            added = [cid for cid in sources if cid not in current]
            self._stop_cameras([current.pop(cid) for cid in removed + changed])
            for cid in changed + added:
                camera = _Camera(cid, sources[cid], urls[cid], self.sink_for(cid), self.output, self.listener,
                                 self.stable_after_s, self.max_pixels)
                current[cid] = camera
                camera.start()
        summary = UpdateSummary(tuple(added), tuple(changed), tuple(removed))
        if added or changed or removed:
            log.info("camera ingest: %d started, %d restarted, %d stopped (%d cameras)",
                     len(added), len(changed), len(removed), len(sources))
        return summary

    def stop(self, timeout: float = 10.0) -> None:
        """Stop every camera; returns once every ffmpeg has been killed and reaped."""
        with self._lock:
            self._stopped = True
            cameras = list(self._cameras.values())
            self._cameras.clear()
            self._stop_cameras(cameras, timeout)

    @staticmethod
    def _stop_cameras(cameras: list[_Camera], timeout: float = 10.0) -> None:
        for camera in cameras:  # all at once, then wait: N cameras stop in one poll, not N
            camera.request_stop()
        deadline = time.monotonic() + timeout  # one deadline for all (a hung sink must not add up)
        for camera in cameras:
            camera.join(deadline)

    def states(self) -> dict[str, CameraState]:
        """Every camera's source state now (for GET /cameras, metrics, the gateway's report)."""
        with self._lock:
            cameras = dict(self._cameras)
        return {cid: camera.stats.snapshot() for cid, camera in cameras.items()}

    def pids(self) -> dict[str, int | None]:
        """Each camera's current ffmpeg pid (None while it waits to retry): for tests and ops."""
        with self._lock:
            return {cid: camera.runner.pid for cid, camera in self._cameras.items()}
