"""Real stream servers for the ingest tests, on free loopback ports.

- ``RtspServer``: Debian's GStreamer RTSP server (tests/support/rtsp_server.py, run by the
  SYSTEM Python, where python3-gi lives) serving an H.264 clip in a loop, optionally with
  basic auth. ``kill``/``start`` (same port) for outages, ``freeze``/``thaw`` (SIGSTOP /
  SIGCONT) for a stream that stops with its TCP connection open.
- ``MjpegServer``: ``ffmpeg -listen 1`` serving the clip as multipart JPEG over HTTP; it
  serves one client and exits, so a thread starts the next one (a camera's web server
  accepts a reconnect too).
- ``children_named(pid, name)``: the live child processes of ``pid`` (from /proc), to check
  that no ffmpeg outlives its reader.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import threading
import time
from pathlib import Path

from tests.support.net import free_port

SYSTEM_PYTHON = "/usr/bin/python3"
RTSP_SCRIPT = Path(__file__).with_name("rtsp_server.py")


def rtsp_server_available() -> bool:
    """The system Python can load GStreamer's RTSP server (Debian: gir1.2-gst-rtsp-server-1.0)."""
    if not Path(SYSTEM_PYTHON).is_file():
        return False
    probe = ("import gi; gi.require_version('Gst','1.0'); gi.require_version('GstRtspServer','1.0');"
             "from gi.repository import Gst, GstRtspServer; Gst.init(None);"
             "assert Gst.ElementFactory.find('rtph264pay') and Gst.ElementFactory.find('h264parse')")
    return subprocess.run([SYSTEM_PYTHON, "-c", probe], capture_output=True, timeout=60).returncode == 0


def ffmpeg_available() -> bool:
    return shutil.which("ffmpeg") is not None


class RtspServer:
    """``rtsp://[user:password@]127.0.0.1:<port>/cam`` serving ``clip`` in a loop."""

    def __init__(self, clip: Path, *, user: str | None = None, password: str | None = None,
                 port: int | None = None, path: str = "/cam") -> None:
        self.clip, self.user, self.password = Path(clip), user, password
        self.port = port or free_port()
        self.path = path
        self.proc: subprocess.Popen | None = None

    def url(self, user: str | None = None, password: str | None = None) -> str:
        auth = f"{user}:{password}@" if user is not None else ""
        return f"rtsp://{auth}127.0.0.1:{self.port}{self.path}"

    def start(self, timeout: float = 30.0) -> "RtspServer":
        argv = [SYSTEM_PYTHON, str(RTSP_SCRIPT), "--clip", str(self.clip), "--port", str(self.port),
                "--path", self.path]
        if self.user is not None:
            argv += ["--user", self.user, "--password", self.password or ""]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        deadline = time.monotonic() + timeout
        line = ""
        while time.monotonic() < deadline:  # the script prints READY once it listens
            line = self.proc.stdout.readline()
            if line.startswith("READY") or not line:
                break
        if not line.startswith("READY"):
            self.kill()
            raise RuntimeError(f"RTSP server did not start: {line!r}")
        return self

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)  # a frozen server must be able to die
            self.proc.kill()
            self.proc.wait(10)
        if self.proc is not None and self.proc.stdout:
            self.proc.stdout.close()

    def freeze(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def __enter__(self) -> "RtspServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()


class MjpegServer:
    """``http://127.0.0.1:<port>/stream.mjpg``: multipart JPEG at the clip's rate, looping."""

    def __init__(self, clip: Path, *, port: int | None = None, quality: int = 5) -> None:
        self.clip, self.quality = Path(clip), quality
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}/stream.mjpg"
        self._proc: subprocess.Popen | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self.clients = 0

    def _serve(self) -> None:
        argv = ["ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin", "-re", "-stream_loop", "-1",
                "-i", str(self.clip), "-an", "-c:v", "mjpeg", "-q:v", str(self.quality), "-f", "mpjpeg",
                "-listen", "1", self.url]
        while not self._stop.is_set():
            self._proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            self._proc.wait()
            self.clients += 1
            self._stop.wait(0.1)

    def start(self) -> "MjpegServer":
        self._thread.start()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if listening(self.port):  # (a test connection would use up the listener's one client)
                return self
            time.sleep(0.1)
        raise RuntimeError("MJPEG server did not start")

    def stop(self) -> None:
        self._stop.set()
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
        self._thread.join(10)

    def __enter__(self) -> "MjpegServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def listening(port: int) -> bool:
    """A TCP socket on ``port`` is in LISTEN state (read from /proc, without connecting)."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                    return True
    return False


def children_named(pid: int, name: str) -> list[int]:
    """Live child processes of ``pid`` whose command is ``name`` (zombies excluded)."""
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        with contextlib.suppress(OSError):
            for child in (task / "children").read_text().split():
                if process_alive(int(child)) and process_name(int(child)) == name:
                    found.append(int(child))
    return found


def process_name(pid: int) -> str | None:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/comm").read_text().strip()
    return None


def process_alive(pid: int) -> bool:
    """Exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"
