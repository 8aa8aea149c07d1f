"""The embedded hosting: ``campusguard serve`` pulls the site file's camera sources itself.

For single-node sites and ``make run``. Each sampled frame goes through the frame flow
(app/flow/frame.py) with no HTTP hop, exactly as if a gateway had POSTed it to
``/detect?camera_id=<id>&timestamp=<capture time>``: the capture-time policy checks the
time first (a refused frame is dropped and counted ``invalid_timestamp``), the engine's
admission may refuse it (503 ``queue_full``: the frame is dropped and the camera waits for
the Retry-After), the rules evaluate it with the decoded frame (detection log, evidence,
view checks), the detections are counted per camera like a request's, and the frame is counted in
the status page's recent traffic as a pulled image (app/core/recent.py). Once answered, the
frame is offered to the shadow lane (docs/shadow.md) with its camera id, sampled like the routes'.
The lane gets the full-size RGB array the reader produced (a new array per frame, never
reused, so it is queued without a copy); the reference letterboxes it itself.

``EmbeddedIngest`` follows the site file (a ``SiteListener`` of the rules' SiteManager):
``check`` refuses a file whose ``${VAR}`` cannot be filled in here (422 on a reload; at
startup the server exits 2), ``applied`` starts, restarts and stops readers. With
``CAMPUSGUARD_INGEST=off`` none of this is built (``NoIngest``): a detection replica behind
gateways never pulls a stream nor needs a camera password.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from app.core.errors import ServiceError
from app.core.sources import SourceBook
from app.flow.frame import LiveFlow
from app.inference.pipeline import DetectParams
from app.ingest.asyncsink import AsyncSink
from app.ingest.command import DEFAULT_MAX_PIXELS, FfmpegMissing, ffmpeg_binary
from app.ingest.frames import Frame, FrameFormat
from app.ingest.hwaccel import with_auto
from app.ingest.mailbox import SinkResult
from app.ingest.source import SourceError, resolve_site, sources_of
from app.ingest.states import CameraState
from app.ingest.supervisor import DEFAULT_MAX_READERS, Supervisor, check_readers
from app.rules.site.loader import SiteConfigError
from app.rules.site.schema import SiteConfig

log = logging.getLogger("campusguard.ingest")


@dataclass(frozen=True)
class IngestOptions:
    """``CAMPUSGUARD_INGEST`` and where ``${VAR}`` secrets are read from (app/wiring fills it)."""

    mode: Literal["embedded", "off"] = "embedded"
    secrets_dir: Path | None = None
    detect: DetectParams = DetectParams()
    stop_timeout_s: float = 10.0
    max_pixels: int = DEFAULT_MAX_PIXELS  # CAMPUSGUARD_INGEST_MAX_PIXELS
    max_readers: int = DEFAULT_MAX_READERS  # CAMPUSGUARD_INGEST_MAX_READERS
    hwaccel_auto: str = "none"  # what a camera's ``hwaccel: auto`` means here (app/ingest/hwaccel.py)


def check_sources(config: SiteConfig, secrets_dir: Path | None, path: Path | str,
                  environ: Mapping[str, str], max_readers: int = DEFAULT_MAX_READERS) -> None:
    """Refuse a site file this process could not pull (SiteConfigError, field named): a
    ``${VAR}`` set nowhere, more sources than ``max_readers``, or sources without ffmpeg."""
    resolve_site(config, environ, secrets_dir, path)
    try:
        check_readers(len(sources_of(config)), max_readers)
    except SourceError as exc:
        raise SiteConfigError(path, [str(exc)]) from None
    if sources_of(config):
        try:
            ffmpeg_binary()
        except FfmpegMissing as exc:
            raise SiteConfigError(path, [str(exc)]) from None


class EngineFeed:
    """One frame into the frame flow (detection, shadow, the camera's rules, metrics), as
    POST /detect would send it."""

    def __init__(self, flow: LiveFlow, params: DetectParams) -> None:
        self.flow, self.params = flow, params  # the flow of a camera per frame: None until its model is loaded

    async def __call__(self, frame: Frame) -> SinkResult:
        with self.flow.held(frame.camera_id) as flow:  # the camera's model (the site file's ``model:``), leased
            if flow is None:  # the model is still loading: wait a moment, like a gateway's 503
                return SinkResult.busy(1.0, "not_ready")
            admitted = flow.admit(frame.camera_id, frame.captured_at)  # InvalidTimestamp: dropped
            start, detected, failed = time.perf_counter(), 0, False
            try:
                # the reader's RGB array goes to the engine and the shadow lane alike (it is the kept frame)
                await flow.run(admitted, frame.as_rgb(), self.params, admitted.keep())  # QueueFull: busy
                detected = 1
            except ServiceError as exc:
                failed = exc.status >= 500  # a 503 refusal under load is an error, as a request's would be
                raise
            except Exception:
                failed = True
                raise
            finally:  # the status page's recent traffic counts pulled frames too, marked as pulled
                flow.metrics.recent.observe(time.perf_counter() - start, detected, failed, pulled=True)
        return SinkResult.sent()


class Ingest(Protocol):
    """Camera ingest as the server runs it: ``EmbeddedIngest``, or ``NoIngest`` when nothing is pulled here."""

    enabled: bool

    def start(self, config: SiteConfig | None, loop: asyncio.AbstractEventLoop) -> None: ...

    def stop(self) -> None: ...

    def states(self) -> dict[str, dict]: ...

    def pids(self) -> dict[str, int | None]: ...


class EmbeddedIngest(Ingest):
    """The readers of this process, following the site file."""

    enabled = True

    def __init__(self, options: IngestOptions, feed: EngineFeed, book: SourceBook, site_path: Path | str,
                 environ: Mapping[str, str] | None = None) -> None:
        self.options, self.feed, self.book, self.site_path = options, feed, book, site_path
        self.environ = environ if environ is not None else os.environ
        self.supervisor: Supervisor | None = None

    # --- SiteListener ----------------------------------------------------------------------
    def check(self, config: SiteConfig) -> None:
        """Refuse a site file this process could not pull (``check_sources``)."""
        check_sources(config, self.options.secrets_dir, self.site_path, self.environ, self.options.max_readers)

    def applied(self, config: SiteConfig) -> None:
        """Start new cameras, restart changed ones, stop removed ones (their ffmpeg is gone
        when this returns)."""
        if self.supervisor is None:
            return
        try:
            summary = self.supervisor.update(with_auto(sources_of(config), self.options.hwaccel_auto))
        except (SourceError, FfmpegMissing, RuntimeError) as exc:  # checked before; the file may have moved on
            log.error("camera ingest not updated: %s", exc)
            return
        for camera_id in summary.stopped:
            self.book.local_changed(camera_id, None)

    # --- lifecycle ---------------------------------------------------------------------------
    def start(self, config: SiteConfig | None, loop: asyncio.AbstractEventLoop) -> None:
        """Check the site file's sources (SiteConfigError: startup stops) and start pulling them."""
        if config is None:  # app/wiring.py builds NoIngest without a site file
            raise ValueError("embedded ingest needs the site file's cameras; none was given")
        self.check(config)
        self.supervisor = Supervisor(lambda _cid: AsyncSink(loop, self.feed), output=FrameFormat.RGB,
                                     listener=self._changed, environ=self.environ,
                                     secrets_dir=self.options.secrets_dir, max_pixels=self.options.max_pixels,
                                     max_readers=self.options.max_readers)
        self.book.set_local(self.states)
        sources = with_auto(sources_of(config), self.options.hwaccel_auto)
        if sources:
            self.supervisor.start(sources)
        log.info("camera ingest embedded: pulling %d camera source(s)", len(sources))

    def stop(self) -> None:
        """Stop every reader; returns once every ffmpeg child was killed and reaped."""
        if self.supervisor is not None:
            self.supervisor.stop(self.options.stop_timeout_s)

    def states(self) -> dict[str, dict]:
        return {cid: state.as_dict() for cid, state in self.supervisor.states().items()} if self.supervisor else {}

    def pids(self) -> dict[str, int | None]:
        return self.supervisor.pids() if self.supervisor is not None else {}

    def _changed(self, state: CameraState) -> None:
        self.book.local_changed(state.camera_id, state.state.value)


class NoIngest(Ingest):
    """``CAMPUSGUARD_INGEST=off`` or no site file: nothing is pulled here."""

    enabled = False

    def start(self, config: SiteConfig | None, loop: asyncio.AbstractEventLoop) -> None:
        pass

    def stop(self) -> None:
        pass

    def states(self) -> dict[str, dict]:
        return {}

    def pids(self) -> dict[str, int | None]:
        return {}
