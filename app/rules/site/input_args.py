"""Which ffmpeg options a camera's ``source.input_args`` may hold: input options from one list.

Why a list: the arguments go onto ffmpeg's command line before ``-i``, in the process that
holds the camera passwords (and, in a gateway, its camera key). Anything ffmpeg accepts
there would do: ``-i /run/secrets/x ... -y /tmp/out`` adds an input and an output and copied
a secret file, ``-dump_attachment`` and ``-report`` write files, a ``lavfi`` or ``concat``
input reads them. Whoever may edit the site file (a ConfigMap in Kubernetes) must not get
what only the gateway's Secrets hold. So each option is a known *input* option with a value
of a known shape, documented in docs/cameras.md ("input_args"); everything else is refused
at site-file validation with the field named.
"""

from __future__ import annotations

import re

_NUMBER = re.compile(r"-?[0-9]{1,15}(\.[0-9]{1,6})?[kKMG]?")
_FLAGS = re.compile(r"[+-]?[a-z_]{1,32}([+-][a-z_]{1,32}){0,15}")  # +nobuffer+genpts, prefer_tcp
_WORD = re.compile(r"[a-z0-9_]{1,32}")
_TEXT = re.compile(r"[\x20-\x7e]{1,256}")  # printable ASCII, one line (a user agent)

# option -> the values it takes (a pattern, or a set of words). One value follows each option.
OPTIONS: dict[str, re.Pattern[str] | frozenset[str]] = {
    # decoding (docs/cameras.md, "Sub-streams": key frames only)
    "-skip_frame": frozenset({"none", "default", "noref", "bidir", "nointra", "nokey"}),
    "-skip_loop_filter": frozenset({"none", "default", "noref", "bidir", "nointra", "nokey", "all"}),
    "-threads": _NUMBER,
    "-c:v": _WORD, "-vcodec": _WORD,  # a decoder by name (h264_cuvid, h264_qsv)
    "-hwaccel_output_format": _WORD,
    # RTSP
    "-rtsp_flags": _FLAGS,
    "-allowed_media_types": _FLAGS,
    "-reorder_queue_size": _NUMBER,
    "-buffer_size": _NUMBER,
    "-max_delay": _NUMBER,
    "-min_port": _NUMBER, "-max_port": _NUMBER,
    # HTTP (MJPEG cameras)
    "-reconnect": _NUMBER, "-reconnect_streamed": _NUMBER, "-reconnect_on_network_error": _NUMBER,
    "-reconnect_delay_max": _NUMBER,
    "-seekable": _NUMBER,
    "-user_agent": _TEXT,
    "-tls_verify": _NUMBER,
    # probing, timing and timeouts
    "-probesize": _NUMBER,
    "-analyzeduration": _NUMBER,
    "-fpsprobesize": _NUMBER,
    "-fflags": _FLAGS,
    "-flags": _FLAGS,
    "-avioflags": _FLAGS,
    "-thread_queue_size": _NUMBER,
    "-rtbufsize": _NUMBER,
    "-timeout": _NUMBER,
    "-rw_timeout": _NUMBER,
    "-use_wallclock_as_timestamps": _NUMBER,
    # the input format, when probing guesses wrong: stream formats only (no lavfi, concat, image2)
    "-f": frozenset({"mjpeg", "mpjpeg", "h264", "hevc", "rtsp", "mpegts", "flv", "rtp", "matroska"}),
}


def check_input_args(args: tuple[str, ...]) -> None:
    """ValueError naming the first argument that is not an allowed option with a valid value."""
    i = 0
    while i < len(args):
        option = args[i]
        allowed = OPTIONS.get(option)
        if allowed is None:
            shown = option[:40]
            what = "an output or file name" if not option.startswith("-") else "not an allowed input option"
            raise ValueError(f"input_args[{i}] {shown!r} is {what}; allowed: {', '.join(sorted(OPTIONS))} "
                             "(docs/cameras.md, input_args), each followed by its value")
        if i + 1 >= len(args):
            raise ValueError(f"input_args[{i}] {option} needs a value")
        value = args[i + 1]
        ok = value in allowed if isinstance(allowed, frozenset) else allowed.fullmatch(value) is not None
        if not ok:
            accepted = ", ".join(sorted(allowed)) if isinstance(allowed, frozenset) else "a value of its usual form"
            raise ValueError(f"input_args[{i + 1}] {value[:40]!r} is not a valid value of {option} ({accepted})")
        i += 2
