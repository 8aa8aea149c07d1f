"""ffmpeg's real output cut into frames, whatever the read sizes; garbage refused."""

from __future__ import annotations

import datetime as dt
import random
import subprocess

import numpy as np
import pytest

from app.ingest.command import build_command
from app.ingest.frames import Frame, FrameFormat
from app.ingest.framing import FramingError, MpjpegParser, Y4mParser
from app.ingest.source import SourceSpec


def ffmpeg_output(clip, output: FrameFormat, max_width: int, seconds: float) -> bytes:
    """What the reader's own command line writes for ``seconds`` of the clip (file input is
    read in real time, so this takes ``seconds``)."""
    spec = SourceSpec(url=f"file://{clip.path}", fps=5, max_width=max_width)
    argv = build_command(f"file://{clip.path}", spec, output)
    argv[argv.index("-i"):argv.index("-i")] = ["-t", str(seconds)]
    return subprocess.run(argv, capture_output=True, check=True, timeout=60).stdout


def feed_in_pieces(parser, data: bytes) -> list:
    rng = random.Random(7)
    frames, pos = [], 0
    while pos < len(data):
        size = rng.choice([1, 7, 100, 4096, 65536, 1 << 20])
        frames += parser.feed(data[pos:pos + size])
        pos += size
    return frames


@pytest.mark.parametrize("output, parser", [(FrameFormat.JPEG, MpjpegParser), (FrameFormat.RGB, Y4mParser)])
def test_real_output_in_any_pieces(walk_clip, output, parser):
    data = ffmpeg_output(walk_clip, output, max_width=320, seconds=1.2)
    whole = parser().feed(data)
    pieces = feed_in_pieces(parser(), data)
    assert 5 <= len(whole) <= 7  # 1.2 s at 5 fps
    assert len(pieces) == len(whole)
    for (w, h, a), (w2, h2, b) in zip(whole, pieces):
        assert (w, h, w2, h2) == (320, 180, 320, 180)  # 640x360 scaled to max_width in ffmpeg
        assert (a == b) if isinstance(a, bytes) else np.array_equal(a, b)
    frame = Frame("cam", dt.datetime.now(dt.timezone.utc), w, h,
                  jpeg=a if isinstance(a, bytes) else None, rgb=None if isinstance(a, bytes) else a)
    rgb = frame.as_rgb()
    assert rgb.shape == (180, 320, 3) and rgb.dtype == np.uint8
    assert rgb.std() > 20  # a real picture, not a grey frame
    again = Frame("cam", frame.captured_at, w, h, jpeg=frame.as_jpeg()).as_rgb()
    assert np.abs(again.astype(int) - rgb.astype(int)).mean() < 8


@pytest.mark.parametrize("parser, junk", [
    (MpjpegParser, b"HTTP/1.1 200 OK\r\nContent-Type: text/html\r\n\r\n<html>"),
    (MpjpegParser, b"--ffmpeg\r\nContent-length: 999999999999\r\n\r\n"),
    (MpjpegParser, b"x" * 5000),
    (Y4mParser, b"RIFF....WAVEfmt \n"),
    (Y4mParser, b"YUV4MPEG2 W640 H360 C444\n"),
    (Y4mParser, b"YUV4MPEG2 W4 H2\nGARBAGE" + b"x" * 5000),
])
def test_garbage_is_refused(parser, junk):
    with pytest.raises(FramingError):
        parser().feed(junk)
