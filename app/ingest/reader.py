"""One ffmpeg run: start it, read its frames and its stderr, end it.

Both pipes are read by the camera's own thread through one ``selectors`` loop (no extra
thread per pipe): ``poll(timeout)`` returns the frames that arrived, stamped with the wall
clock when they were read, and keeps the last stderr lines (redacted at once, so a
password never sits in memory as log text). ``poll`` returning with no frame is how the
watchdog sees time pass.
"""

from __future__ import annotations

import collections
import datetime as dt
import os
import selectors
import subprocess
import time
from dataclasses import dataclass

import numpy as np

from app.core.redact import redact_text
from app.ingest.frames import FrameFormat
from app.ingest.framing import FrameParser, MpjpegParser, Y4mParser
from app.ingest.process import kill, spawn

READ_CHUNK = 1 << 20
STDERR_LINES = 20


@dataclass(frozen=True, slots=True)
class RawFrame:
    """A frame off the pipe: when it was read (wall clock and monotonic) and its payload."""

    captured_at: dt.datetime
    read_at: float
    width: int
    height: int
    payload: bytes | np.ndarray


class FfmpegRun:
    """A single ffmpeg process and its pipes; not restartable (the watchdog makes a new one)."""

    def __init__(self, argv: list[str], output: FrameFormat, secrets: list[str]) -> None:
        self.argv, self.secrets = argv, secrets
        self.parser: FrameParser = MpjpegParser() if output is FrameFormat.JPEG else Y4mParser()
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_LINES)
        self._err_partial = b""
        self.over_cap: str | None = None  # ffmpeg's first "exceeds max pixel count" line (kept past the tail)
        self.proc: subprocess.Popen | None = None
        self._selector = selectors.DefaultSelector()
        self._open = 0
        self.started_at = 0.0

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self) -> None:
        self.proc = spawn(self.argv)
        self.started_at = time.monotonic()
        for pipe in (self.proc.stdout, self.proc.stderr):
            assert pipe is not None  # spawn() pipes both
            os.set_blocking(pipe.fileno(), False)
            self._selector.register(pipe, selectors.EVENT_READ)
        self._open = 2

    @property
    def finished(self) -> bool:
        """Both pipes closed (ffmpeg exited and everything it wrote was read)."""
        return self._open == 0

    def poll(self, timeout: float) -> list[RawFrame]:
        """Frames read within ``timeout`` seconds (may be empty). Raises ``FramingError`` on a
        pipe that is not what ffmpeg was asked to write."""
        frames: list[RawFrame] = []
        if self._open == 0:
            time.sleep(timeout)
            return frames
        assert self.proc is not None  # _open > 0: started
        for key, _ in self._selector.select(timeout):
            try:
                data = os.read(key.fd, READ_CHUNK)
            except BlockingIOError:
                continue
            if not data:
                self._selector.unregister(key.fileobj)
                self._open -= 1
                if key.fileobj is self.proc.stderr:
                    self._stderr(b"\n")
                continue
            if key.fileobj is self.proc.stderr:
                self._stderr(data)
                continue
            parsed = self.parser.feed(data)
            if parsed:
                now, mono = dt.datetime.now(dt.timezone.utc), time.monotonic()
                frames += [RawFrame(now, mono, w, h, payload) for w, h, payload in parsed]
        return frames

    def _stderr(self, data: bytes) -> None:
        lines = (self._err_partial + data).split(b"\n")
        self._err_partial = lines.pop()[-4096:]
        for line in lines:
            text = line.decode("utf-8", errors="replace").strip()
            if text:
                shown = redact_text(text, self.secrets)[:500]
                self.stderr_tail.append(shown)
                if self.over_cap is None and "exceeds specified max pixel count" in text:
                    self.over_cap = shown

    def lines(self) -> list[str]:
        """ffmpeg's last lines, after the line saying a picture was over the pixel cap, if any:
        repeated decode errors would push it out of the tail, and it is the one that says why."""
        return ([self.over_cap] if self.over_cap is not None else []) + list(self.stderr_tail)

    def returncode(self) -> int | None:
        return self.proc.poll() if self.proc else None

    def stop(self) -> int | None:
        """Kill and reap ffmpeg (idempotent); returns its exit status."""
        if self.proc is None:
            return None
        if self._selector.get_map() is not None:
            self._selector.close()
        self._open = 0
        return kill(self.proc)
