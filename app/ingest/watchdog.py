"""The life of one camera's source: run ffmpeg, watch it, say why it ended, back off, again.

Why a watchdog and not ffmpeg's own timeouts: a camera in trouble may keep its TCP
connection open and send nothing (or only keep-alives), and a decoder may hang; the only
reliable signal is "no frame for ``stall_after_s``", so that is what restarts the reader
(state ``stalled``). ffmpeg's socket timeout stays as a backstop, set longer than the
watchdog's, so the watchdog speaks first.

A failed run ends in a state from ffmpeg's stderr (``auth_failed``, ``unreachable``,
``bad_stream``, else ``backoff``) and a wait of 1 s, doubling up to ``max_backoff_s``; a run
that streamed for ``stable_after_s`` resets the wait. A dead camera therefore costs one
ffmpeg start per ``max_backoff_s``, never a spin.

The connect burst: on connecting ffmpeg decodes what it buffered while probing and writes
it at once (several frames within milliseconds). Those frames would reach the rules as a
crowd of same-time frames, so frames are accepted only once they arrive at the sampled
pace: a frame read less than half a sampling interval after the previous read is dropped
(``connect_burst`` before the first accepted frame, ``burst`` after).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from app.ingest.classify import explain
from app.ingest.command import DEFAULT_MAX_PIXELS, build_command, describe_command
from app.ingest.frames import Frame, FrameFormat
from app.ingest.framing import FramingError
from app.ingest.reader import FfmpegRun, RawFrame
from app.ingest.source import Resolved, SourceSpec
from app.ingest.states import CameraStats, SourceState

log = logging.getLogger(__name__)

POLL_S = 0.25
STABLE_AFTER_S = 30.0
FIRST_BACKOFF_S = 1.0


@dataclass(frozen=True)
class RunOutcome:
    """How one ffmpeg run ended."""

    state: SourceState
    error: str
    streamed_s: float


class CameraRunner:
    """One camera's reader thread (ffmpeg, watchdog, backoff); frames go to ``on_frame``."""

    def __init__(self, camera_id: str, spec: SourceSpec, source: Resolved, output: FrameFormat,
                 on_frame: Callable[[Frame], None], stats: CameraStats, *,
                 stable_after_s: float = STABLE_AFTER_S, max_pixels: int = DEFAULT_MAX_PIXELS) -> None:
        self.camera_id, self.spec, self.output, self.on_frame = camera_id, spec, output, on_frame
        self.stats, self.stable_after_s, self.max_pixels = stats, stable_after_s, max_pixels
        self._url = source.url  # for ffmpeg only
        self._secrets = list(source.secrets)
        self.shown_url = source.shown  # built from the template: ${NAME}, never a value
        self._stop = threading.Event()
        self._run: FfmpegRun | None = None
        self._thread = threading.Thread(target=self._loop, name=f"ingest-read-{camera_id}", daemon=True)

    # --- control ----------------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    def request_stop(self) -> None:
        """Ask the thread to end (it kills its ffmpeg within one poll)."""
        self._stop.set()

    def join(self, timeout: float = 10.0) -> None:
        self._thread.join(timeout)
        run = self._run
        if self._thread.is_alive() and run is not None:  # stuck thread: kill the child anyway
            run.stop()

    def stop(self, timeout: float = 10.0) -> None:
        self.request_stop()
        self.join(timeout)

    @property
    def pid(self) -> int | None:
        """The current ffmpeg's pid (None between runs)."""
        run = self._run
        return run.pid if run is not None and run.returncode() is None else None

    # --- the loop ---------------------------------------------------------------------
    def _loop(self) -> None:
        backoff = FIRST_BACKOFF_S
        first = True
        while not self._stop.is_set():
            if first:  # a retry keeps showing why it retries, until frames flow again
                self.stats.set_state(SourceState.CONNECTING)
            else:
                self.stats.reconnect()
            first = False
            try:
                outcome = self._run_once()
            except Exception as exc:  # a bug here must not kill the camera for good
                log.exception("camera %s: reader failed", self.camera_id)
                outcome = RunOutcome(SourceState.BACKOFF, f"reader error: {type(exc).__name__}", 0.0)
            if self._stop.is_set():
                break
            if outcome.streamed_s >= self.stable_after_s:
                backoff = FIRST_BACKOFF_S
            previous = self.stats.snapshot()
            self.stats.set_state(outcome.state, outcome.error)
            level = logging.WARNING if (previous.state, previous.last_error) != (outcome.state, outcome.error) \
                else logging.DEBUG
            log.log(level, "camera %s (%s): %s: %s; retrying in %.0f s", self.camera_id, self.shown_url,
                    outcome.state.value, outcome.error, backoff)
            self._stop.wait(backoff)
            backoff = min(backoff * 2, self.spec.max_backoff_s)

    def _run_once(self) -> RunOutcome:
        argv = build_command(self._url, self.spec, self.output, max_pixels=self.max_pixels)
        run = FfmpegRun(argv, self.output, self._secrets)
        log.debug("camera %s: %s", self.camera_id, describe_command(argv, self._url, self.shown_url))
        self._run = run
        run.start()
        started = time.monotonic()
        prev_read: float | None = None  # when the previous frames were read
        first_accepted: float | None = None
        try:
            while not self._stop.is_set():
                try:
                    frames = run.poll(POLL_S)
                except FramingError as exc:
                    return RunOutcome(SourceState.BAD_STREAM, f"unreadable output from ffmpeg: {exc}",
                                      self._streamed(first_accepted))
                now = time.monotonic()
                large = next((f for f in frames if f.width * f.height > self.max_pixels), None)
                if large is not None:  # ffmpeg's -max_pixels is on the decoder; the pipe is checked too
                    return RunOutcome(SourceState.BAD_STREAM, f"a frame of {large.width}x{large.height} is over "
                                      f"CAMPUSGUARD_INGEST_MAX_PIXELS ({self.max_pixels})",
                                      self._streamed(first_accepted))
                if frames:
                    read_at = frames[-1].read_at
                    gap = read_at - prev_read if prev_read is not None else 0.0  # the first read is a burst
                    prev_read = read_at
                    if self._accept(frames, gap, live=first_accepted is not None) and first_accepted is None:
                        first_accepted = now
                        self.stats.set_state(SourceState.STREAMING)
                if run.finished:
                    return self._ended(run, first_accepted)
                if now - (prev_read or started) >= self.spec.stall_after_s:
                    if prev_read is not None:
                        return RunOutcome(SourceState.STALLED, f"no frame for {self.spec.stall_after_s:g} s",
                                          self._streamed(first_accepted))
                    state, said = explain(run.lines())
                    if state is None:  # ffmpeg complained about what it got (garbage it cannot decode)
                        state = SourceState.BAD_STREAM if said else SourceState.UNREACHABLE
                    elif state is not SourceState.AUTH_FAILED and state is not SourceState.BAD_STREAM:
                        state = SourceState.UNREACHABLE
                    return RunOutcome(state, f"no frame within {self.spec.stall_after_s:g} s"
                                      f" of connecting{f' ({said})' if said else ''}", 0.0)
            return RunOutcome(SourceState.BACKOFF, "stopped", self._streamed(first_accepted))
        finally:
            run.stop()
            self._run = None

    def _accept(self, frames: list[RawFrame], gap: float, live: bool) -> bool:
        """Count every frame read; pass on the newest one if it came at the sampled pace."""
        min_gap = 0.5 / self.spec.fps
        for raw in frames[:-1]:
            self.stats.read(raw.captured_at, counted_for_fps=live)
            self.stats.drop("burst" if live else "connect_burst")
        raw = frames[-1]
        if gap < min_gap:
            self.stats.read(raw.captured_at, counted_for_fps=live)
            self.stats.drop("burst" if live else "connect_burst")
            return False
        self.stats.read(raw.captured_at)
        payload = raw.payload
        self.on_frame(Frame(self.camera_id, raw.captured_at, raw.width, raw.height,
                            jpeg=payload if isinstance(payload, bytes) else None,
                            rgb=None if isinstance(payload, bytes) else payload))
        return True

    def _ended(self, run: FfmpegRun, first_accepted: float | None) -> RunOutcome:
        status = run.stop()
        lines = run.lines()
        state, said = explain(lines)
        error = said or f"ffmpeg exited with status {status}"
        state = state or SourceState.BACKOFF
        return RunOutcome(state, error, self._streamed(first_accepted))

    @staticmethod
    def _streamed(first_accepted: float | None) -> float:
        return time.monotonic() - first_accepted if first_accepted is not None else 0.0
