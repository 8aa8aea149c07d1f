"""Cut ffmpeg's output pipe into frames, incrementally and with bounded memory.

Both formats describe their own framing, so nothing is guessed from the input's size:
``mpjpeg`` puts a ``Content-length`` before each JPEG, ``yuv4mpegpipe`` states the frame
size in its header and starts each frame with ``FRAME``. A parser keeps at most one frame
plus one read's worth of bytes; anything malformed raises ``FramingError`` (the reader
then restarts ffmpeg and says ``bad_stream``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import cv2
import numpy as np

MAX_FRAME_BYTES = 64 * 1024 * 1024  # 4K RGB is 25 MB; anything larger is a broken stream
_MAX_HEADER = 4096


class FramingError(ValueError):
    """The pipe does not hold what ffmpeg was asked to write."""


class FrameParser(Protocol):
    def feed(self, data: bytes) -> Sequence[tuple[int, int, bytes | np.ndarray]]:
        """Bytes in; complete frames out as (width, height, payload)."""


class MpjpegParser:
    """``--ffmpeg\\r\\nContent-type: image/jpeg\\r\\nContent-length: N\\r\\n\\r\\n<N bytes>\\r\\n``."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._need: int | None = None  # body length of the frame being read

    def feed(self, data: bytes) -> list[tuple[int, int, bytes]]:
        self._buf += data
        out: list[tuple[int, int, bytes]] = []
        while True:
            if self._need is None:
                end = self._buf.find(b"\r\n\r\n")
                if end < 0:
                    if len(self._buf) > _MAX_HEADER:
                        raise FramingError("no multipart header in the first 4 KiB")
                    return out
                self._need = self._content_length(bytes(self._buf[:end]))
                del self._buf[:end + 4]
            if len(self._buf) < self._need:
                return out
            jpeg = bytes(self._buf[:self._need])
            del self._buf[:self._need]
            self._need = None
            out.append((*_jpeg_size(jpeg), jpeg))

    @staticmethod
    def _content_length(header: bytes) -> int:
        for line in header.split(b"\r\n"):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                try:
                    length = int(value.strip())
                except ValueError:
                    break
                if not 0 < length <= MAX_FRAME_BYTES:
                    raise FramingError(f"frame of {length} bytes")
                return length
        raise FramingError("multipart part without a Content-length")


def _jpeg_size(jpeg: bytes) -> tuple[int, int]:
    """(width, height) from the first SOF marker (no decode)."""
    i = 2
    while i + 9 < len(jpeg):
        if jpeg[i] != 0xFF:
            i += 1
            continue
        marker = jpeg[i + 1]
        if marker in (0xC0, 0xC1, 0xC2):
            return int.from_bytes(jpeg[i + 7:i + 9], "big"), int.from_bytes(jpeg[i + 5:i + 7], "big")
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7 or marker == 0xFF:
            i += 2 if marker != 0xFF else 1
            continue
        i += 2 + int.from_bytes(jpeg[i + 2:i + 4], "big")
    raise FramingError("a JPEG without a frame header")


class Y4mParser:
    """``YUV4MPEG2 W.. H.. ...\\n`` then ``FRAME\\n`` + W*H*3/2 bytes per frame, made RGB."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._size: tuple[int, int] | None = None

    def feed(self, data: bytes) -> list[tuple[int, int, np.ndarray]]:
        self._buf += data
        out: list[tuple[int, int, np.ndarray]] = []
        if self._size is None:
            end = self._buf.find(b"\n")
            if end < 0:
                if len(self._buf) > _MAX_HEADER:
                    raise FramingError("no YUV4MPEG2 header")
                return out
            self._size = self._header(bytes(self._buf[:end]))
            del self._buf[:end + 1]
        width, height = self._size
        frame_bytes = width * height * 3 // 2
        while True:
            end = self._buf.find(b"\n", 0, _MAX_HEADER)
            if end < 0:
                if len(self._buf) > _MAX_HEADER:
                    raise FramingError("no FRAME marker")
                return out
            if not self._buf.startswith(b"FRAME"):
                raise FramingError("frame without a FRAME marker")
            if len(self._buf) < end + 1 + frame_bytes:
                return out
            yuv = np.frombuffer(bytes(self._buf[end + 1:end + 1 + frame_bytes]), np.uint8)
            del self._buf[:end + 1 + frame_bytes]
            rgb = cv2.cvtColor(yuv.reshape(height * 3 // 2, width), cv2.COLOR_YUV2RGB_I420)
            out.append((width, height, rgb))

    @staticmethod
    def _header(line: bytes) -> tuple[int, int]:
        fields = line.split()
        if not fields or fields[0] != b"YUV4MPEG2":
            raise FramingError("not a YUV4MPEG2 stream")
        values = {f[:1]: f[1:] for f in fields[1:]}
        try:
            width, height = int(values[b"W"]), int(values[b"H"])
        except (KeyError, ValueError):
            raise FramingError("YUV4MPEG2 header without W and H") from None
        chroma = values.get(b"C", b"420jpeg")
        if not chroma.startswith(b"420") or width % 2 or height % 2:
            raise FramingError(f"unexpected YUV4MPEG2 layout C{chroma.decode(errors='replace')} {width}x{height}")
        if not 0 < width * height * 3 // 2 <= MAX_FRAME_BYTES:
            raise FramingError(f"frame of {width}x{height}")
        return width, height
