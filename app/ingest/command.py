"""The ffmpeg command line for one camera: connect, decode, sample, scale, write frames.

Everything costly happens inside ffmpeg, in its own process (crash isolation, hardware
decode and scaling for free, the Frigate/Viseron pattern):

- RTSP over TCP by default (UDP loses packets on busy campus networks), a socket timeout
  as a backstop (the watchdog is the real stall detector, see watchdog.py);
- corrupt packets and frames discarded rather than passed on as grey smears;
- ``fps`` before ``scale``: only the sampled frames are scaled;
- HTTP sources (MJPEG) carry no timestamps, so they are stamped with the wall clock for
  the ``fps`` filter to sample correctly; ``file:`` sources are read in real time and loop;
- output as multipart JPEG (``mpjpeg``) or raw YUV 4:2:0 (``yuv4mpegpipe``), both self-framed;
- ``-max_pixels`` on the decoder: the camera network is not trusted, and a JPEG that declares
  16000x16000 made one ffmpeg take ~800 MiB; larger pictures fail to decode (``bad_stream``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from app.ingest.frames import FrameFormat
from app.ingest.source import SourceSpec, file_path

VAAPI_DEVICE = "/dev/dri/renderD128"
JPEG_QUALITY = 3  # ffmpeg's mjpeg -q:v scale (2 best .. 31 worst): ~95 % JPEG quality
DEFAULT_MAX_PIXELS = 16_777_216  # 4096 x 4096: every real camera's main stream up to 4K (CAMPUSGUARD_INGEST_MAX_PIXELS)


class FfmpegMissing(RuntimeError):
    """ffmpeg is not installed where the readers run."""


def ffmpeg_binary() -> str:
    found = shutil.which("ffmpeg")
    if found is None:
        raise FfmpegMissing("ffmpeg is not installed: camera ingest needs it (apt-get install ffmpeg)")
    return found


def input_options(url: str, spec: SourceSpec, stall_backstop_s: float,
                  max_pixels: int = DEFAULT_MAX_PIXELS) -> list[str]:
    """Options placed before ``-i``: protocol, timeouts, the pixel cap, hardware decode, the camera's own."""
    scheme = url.split(":", 1)[0].lower()
    timeout_us = str(int(stall_backstop_s * 1_000_000))
    opts: list[str] = ["-fflags", "+discardcorrupt+genpts", "-max_pixels", str(max_pixels)]
    if scheme in ("rtsp", "rtsps"):
        opts += ["-rtsp_transport", spec.transport, "-timeout", timeout_us]
    elif scheme in ("http", "https"):
        opts += ["-rw_timeout", timeout_us, "-use_wallclock_as_timestamps", "1"]
    elif scheme == "file":
        opts += ["-re", "-stream_loop", "-1"]
    # "auto" reaches here only where nothing resolved it (a gateway: app/ingest/hwaccel.py): none
    if spec.hwaccel == "vaapi":
        opts += ["-hwaccel", "vaapi", "-hwaccel_device", VAAPI_DEVICE]
    elif spec.hwaccel == "cuda":
        opts += ["-hwaccel", "cuda"]
    return opts + list(spec.input_args)


def video_filter(spec: SourceSpec) -> str:
    """Sample to ``fps`` first, then scale down to ``max_width`` (never up; even sizes)."""
    fps = f"{spec.fps:g}"
    return f"fps={fps},scale=w='trunc(min(iw,{spec.max_width})/2)*2':h=-2"


def build_command(url: str, spec: SourceSpec, output: FrameFormat, *,
                  stall_backstop_s: float | None = None, max_pixels: int = DEFAULT_MAX_PIXELS) -> list[str]:
    """The argv for one reader; ``url`` is the resolved URL (it holds the credentials, so
    the argv itself is never logged: see ``describe_command``)."""
    backstop = stall_backstop_s if stall_backstop_s is not None else spec.stall_after_s + 10
    source = str(file_path(url)) if url.lower().startswith("file:") else url
    cmd = [ffmpeg_binary(), "-hide_banner", "-nostdin", "-nostats", "-loglevel", "error",
           *input_options(url, spec, backstop, max_pixels)]
    cmd += ["-i", source, "-an", "-sn", "-dn", "-vf", video_filter(spec)]
    if output is FrameFormat.JPEG:
        cmd += ["-c:v", "mjpeg", "-q:v", str(JPEG_QUALITY), "-f", "mpjpeg", "pipe:1"]
    else:
        cmd += ["-pix_fmt", "yuv420p", "-f", "yuv4mpegpipe", "pipe:1"]
    return cmd


def describe_command(cmd: list[str], url: str, redacted: str) -> str:
    """The argv as one line for logs, with the URL (or file path) replaced by its redacted form."""
    secret_forms = {url}
    if url.lower().startswith("file:"):
        secret_forms.add(str(file_path(url)))
    return " ".join(redacted if part in secret_forms else part for part in [Path(cmd[0]).name, *cmd[1:]])
