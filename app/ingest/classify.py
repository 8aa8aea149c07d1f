"""What ffmpeg's last words say about a failed source.

An operator needs to know whether to fix a password, a network path or the camera's
encoder settings, and a dead camera must not be retried as fast as a hiccup. ffmpeg's
error lines (``-loglevel error``) are stable English across versions 4-7; the patterns
below come from real runs (tests/ingest/test_reader.py provokes each one).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from app.ingest.states import SourceState

_PATTERNS: list[tuple[SourceState, re.Pattern[str]]] = [
    # a picture over -max_pixels (CAMPUSGUARD_INGEST_MAX_PIXELS) first: the decode errors after it say less
    (SourceState.BAD_STREAM, re.compile(r"exceeds specified max pixel count", re.I)),
    (SourceState.AUTH_FAILED, re.compile(
        r"\b401\b|unauthori[sz]ed|authori[sz]ation failed|\b403\b|forbidden", re.I)),
    (SourceState.UNREACHABLE, re.compile(
        r"connection refused|connection timed out|timed out|no route to host|network is unreachable"
        r"|\b404\b|failed to resolve hostname|name or service not known"
        r"|temporary failure in name resolution|no such file or directory|host is down"
        r"|server returned 5\d\d|5xx server error|\b503\b", re.I)),
    (SourceState.BAD_STREAM, re.compile(
        r"invalid data found when processing input|unsupported codec|decoder .* not found"
        r"|could not find codec parameters|no decoder|unspecified size|moov atom not found"
        r"|protocol not found|does not contain any stream|invalid argument|not supported"
        # garbage that does not decode
        r"|picture size \d+x\d+ is invalid|invalid image size|error while decoding"
        r"|could not find ref with poc|no jpeg data found|invalid frame dimensions"
        # hardware decode asked for and not available: ffmpeg does not fall back by itself
        r"|no device available for decoder|device creation failed|device setup failed|cannot load libcuda", re.I)),
]


_CONTEXT = re.compile(r"^\[[^\]]* @ 0x[0-9a-f]+\]\s*")  # "[tcp @ 0x55d0...] "


def explain(lines: Iterable[str]) -> tuple[SourceState | None, str | None]:
    """The state ffmpeg's stderr points to and the line that says so.

    Classes are tried in the order auth > unreachable > bad stream (a 401 line is followed
    by generic ones); within a class the last matching line wins. Without a match: no
    state, and ffmpeg's last line (its own summary, ``url: reason``)."""
    lines = [_CONTEXT.sub("", line.strip()) for line in lines if line.strip()]
    for state, pattern in _PATTERNS:
        for line in reversed(lines):
            if pattern.search(line):
                return state, line[:300]
    for line in reversed(lines):
        if not line.startswith("Last message repeated"):
            return None, line[:300]
    return None, None
