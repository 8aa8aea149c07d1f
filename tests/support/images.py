"""Synthetic image bytes for tests: real encoders (OpenCV), never hand-made pixels in files."""

from __future__ import annotations

import struct
import zlib

import cv2
import numpy as np


def encode(img: np.ndarray, ext: str = ".jpg", **params) -> bytes:
    flags = []
    for key, value in params.items():
        flags += [getattr(cv2, key), value]
    ok, buf = cv2.imencode(ext, img, flags)
    assert ok
    return buf.tobytes()


def noise_image(width: int, height: int, seed: int = 0, channels: int = 3, dtype=np.uint8) -> np.ndarray:
    rng = np.random.default_rng(seed)
    hi = 65535 if dtype == np.uint16 else 255
    shape = (height, width) if channels == 1 else (height, width, channels)
    base = rng.integers(0, hi, size=(max(1, height // 16), max(1, width // 16), channels), dtype=np.int64)
    img = cv2.resize(base.astype(dtype), (width, height), interpolation=cv2.INTER_NEAREST)
    return img.reshape(shape)


def png_declaring(width: int, height: int) -> bytes:
    """A tiny, valid-looking PNG whose header declares width x height (decompression bomb)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    row = b"\x00" + b"\x00" * 3 * 16
    idat = zlib.compress(row * 16, 9)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


def corrupt_huffman(data: bytes) -> bytes:
    """A JPEG whose header and end marker are fine but whose Huffman table id is invalid: neither
    libjpeg (torchvision) nor OpenCV decodes it."""
    at = data.find(b"\xff\xc4")
    broken = bytearray(data)
    broken[at + 4] = 0x07
    return bytes(broken)
