"""Turn untrusted bytes into an RGB ``uint8`` array, or a typed error.

The container format is sniffed from magic bytes (never from the client's Content-Type),
and the declared dimensions are read from the header with Pillow *before* OpenCV
allocates the full frame, so a 50000x50000 PNG of a few kilobytes is refused without
allocating gigabytes.
"""

from __future__ import annotations

import io
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import cv2
import numpy as np
from PIL import BmpImagePlugin, ImageFile, JpegImagePlugin, PngImagePlugin, WebPImagePlugin

from app.core.errors import ImageTooLarge, InvalidImage, UnsupportedMediaType

SUPPORTED_FORMATS = ("jpeg", "png", "bmp", "webp")
MEDIA_TYPES = {"jpeg": "image/jpeg", "png": "image/png", "bmp": "image/bmp", "webp": "image/webp"}
# File names of the formats above, for commands that read folders (eval, bench, export).
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".webp"})


def image_files(folder: Path, suffixes: frozenset[str] = IMAGE_SUFFIXES) -> list[Path]:
    """Image files directly in ``folder``, sorted by name; none when it is not a folder."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in suffixes)


def sniff_format(data: bytes) -> str | None:
    """Name of the image format from its magic bytes, or None for anything else."""
    if data[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "png"
    if data[:2] == b"BM":
        return "bmp"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None


# The header parser of each sniffed format, called directly rather than through
# ``PIL.Image.open``: importing ultralytics monkey-patches ``Image.open`` so that an
# unidentified file triggers ``check_requirements("pi-heif")`` (a pip install attempt)
# -- untrusted bytes must never do that. It also skips Pillow's own decompression-bomb
# limit, so ``max_pixels`` alone decides.
_HEADER_READERS: dict[str, Callable[[IO[bytes]], ImageFile.ImageFile]] = {
    "jpeg": JpegImagePlugin.JpegImageFile,
    "png": PngImagePlugin.PngImageFile,
    "bmp": BmpImagePlugin.BmpImageFile,
    "webp": WebPImagePlugin.WebPImageFile,
}


OTHER_FORMATS = {b"GIF87a": "gif", b"GIF89a": "gif", b"II*\x00": "tiff", b"MM\x00*": "tiff", b"%PDF": "pdf",
                 b"\x00\x00\x00\x0cjP": "jpeg2000", b"8BPS": "psd", b"<svg": "svg", b"<?xml": "xml"}


def other_format(data: bytes) -> str | None:
    """Recognisable formats we do not decode (415), as opposed to garbage (400)."""
    for magic, name in OTHER_FORMATS.items():
        if data.startswith(magic):
            return name
    if data[4:12] in (b"ftypheic", b"ftypheix", b"ftypavif", b"ftypmif1"):
        return "heif/avif"
    return None


def read_header(data: bytes, fmt: str | None = None) -> tuple[int, int, int]:
    """(width, height, EXIF orientation 1..8) of the stored pixels, from the header alone."""
    fmt = fmt or sniff_format(data)
    if fmt not in _HEADER_READERS:
        raise UnsupportedMediaType(f"not a supported image (expected one of {', '.join(SUPPORTED_FORMATS)})")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with _HEADER_READERS[fmt](io.BytesIO(data)) as img:
                width, height = img.size
                orientation = _orientation(img)
    except Exception as exc:
        raise InvalidImage(f"image header could not be read: {exc.__class__.__name__}") from exc
    return width, height, orientation


def _orientation(img) -> int:
    """EXIF orientation, only when the header already holds the EXIF block (never load)."""
    if "exif" not in img.info:
        return 1
    try:
        value = int(img.getexif().get(0x0112, 1))
    except Exception:  # a broken EXIF block is not a broken image
        return 1
    return value if 1 <= value <= 8 else 1


def apply_orientation(img: np.ndarray, orientation: int) -> np.ndarray:
    """Turn stored pixels upright as EXIF says (PIL's exif_transpose, OpenCV's imread):
    phone photos are stored sideways, and Ultralytics' reference predicts them upright."""
    if orientation == 2:
        img = img[:, ::-1]
    elif orientation == 3:
        img = img[::-1, ::-1]
    elif orientation == 4:
        img = img[::-1]
    elif orientation == 5:
        img = img.swapaxes(0, 1)
    elif orientation == 6:
        img = np.rot90(img, -1)
    elif orientation == 7:
        img = img[::-1, ::-1].swapaxes(0, 1)
    elif orientation == 8:
        img = np.rot90(img, 1)
    else:
        return img
    return np.ascontiguousarray(img)


def to_rgb8(img: np.ndarray) -> np.ndarray:
    """Normalise what ``IMREAD_UNCHANGED`` yields (gray, BGRA, 16-bit) to RGB uint8."""
    if img.dtype == np.uint16:
        img = (img >> 8).astype(np.uint8)
    elif img.dtype != np.uint8:
        img = cv2.normalize(img, None, 0, 255, cv2.NORM_MINMAX).astype(np.uint8)
    if img.ndim == 2:
        return cv2.cvtColor(img, cv2.COLOR_GRAY2RGB)
    channels = img.shape[2]
    if channels == 1:
        return cv2.cvtColor(img[:, :, 0], cv2.COLOR_GRAY2RGB)
    if channels == 4:
        return cv2.cvtColor(img, cv2.COLOR_BGRA2RGB)
    if channels == 3:
        return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
    raise InvalidImage(f"unsupported channel count {channels}")


@dataclass(frozen=True, slots=True)
class Header:
    """What the header says about an image that passed the checks (format, size, limit)."""

    fmt: str
    width: int  # stored pixels
    height: int
    orientation: int  # EXIF 1..8

    @property
    def upright(self) -> tuple[int, int]:
        """(width, height) once EXIF orientation is applied: the frame the boxes refer to."""
        return (self.height, self.width) if self.orientation in (5, 6, 7, 8) else (self.width, self.height)


REDUCTIONS = (8, 4, 2)  # libjpeg-turbo's DCT scaling, largest first
# A JPEG is always 8-bit colour or grey: libjpeg-turbo writes it straight out as RGB (no BGR
# array converted afterwards: 10-15 % of a decode measured under load). EXIF orientation is
# applied below for every format alike, never by OpenCV.
_JPEG_FLAGS = {r: (flag & ~cv2.IMREAD_COLOR) | cv2.IMREAD_COLOR_RGB | cv2.IMREAD_IGNORE_ORIENTATION
               for r, flag in {1: cv2.IMREAD_COLOR, 2: cv2.IMREAD_REDUCED_COLOR_2, 4: cv2.IMREAD_REDUCED_COLOR_4,
                               8: cv2.IMREAD_REDUCED_COLOR_8}.items()}


def probe(data: bytes | bytearray | memoryview, max_pixels: int) -> tuple[bytes, Header]:
    """Sniff and read the header of untrusted bytes, refusing what must not be decoded.

    Raises ``InvalidImage`` (empty, garbage, unreadable header), ``UnsupportedMediaType``
    (not JPEG/PNG/BMP/WebP) or ``ImageTooLarge`` (more than ``max_pixels`` declared pixels).
    """
    if not data:
        raise InvalidImage("empty image")
    if not isinstance(data, bytes):  # memoryview/bytearray (Pipeline.prepare takes them):
        data = bytes(data)  # `in`, startswith and slices below need a real byte string
    fmt = sniff_format(data)
    if fmt is None:
        other = other_format(data)
        if other is not None:
            raise UnsupportedMediaType(f"{other} images are not supported (send one of {', '.join(SUPPORTED_FORMATS)})")
        raise InvalidImage(f"not an image: the data matches none of {', '.join(SUPPORTED_FORMATS)}")
    width, height, orientation = read_header(data, fmt)
    if width <= 0 or height <= 0:
        raise InvalidImage("image has no pixels")
    if width * height > max_pixels:
        raise ImageTooLarge(f"image is {width}x{height} = {width * height} pixels; the limit is {max_pixels}")
    return data, Header(fmt, width, height, orientation)


def reduction_for(header: Header, scale: float, min_width: int = 0) -> int:
    """The DCT reduction (1, 2, 4 or 8) a JPEG can be decoded at for a letterbox ``scale``.

    A frame that is shrunk by ``scale`` <= 1/r anyway loses nothing the model sees when
    libjpeg-turbo decodes it at 1/r (it skips most of the IDCT and colour work). Only JPEG
    has this; ``min_width`` keeps a frame that is also wanted as evidence at least that wide.
    """
    if header.fmt != "jpeg":
        return 1
    width = header.upright[0]
    for r in REDUCTIONS:
        if scale <= 1.0 / r and -(-width // r) >= min_width:
            return r
    return 1


def decode_pixels(data: bytes, header: Header, reduction: int = 1) -> np.ndarray:
    """Decode probed bytes to an upright HxWx3 RGB uint8 array, at 1/``reduction`` size (JPEG).

    The reduced array is ``ceil(side / reduction)`` on each side; whoever maps boxes back
    must use the header's size (``Pipeline.prepare`` does, through the letterbox).
    """
    buf = np.frombuffer(data, dtype=np.uint8)
    jpeg = header.fmt == "jpeg"
    img = cv2.imdecode(buf, _JPEG_FLAGS[reduction] if jpeg else cv2.IMREAD_UNCHANGED | cv2.IMREAD_ANYDEPTH)
    if img is None or img.size == 0:
        raise InvalidImage(f"{header.fmt} data could not be decoded (corrupt or truncated)")
    if jpeg and not _jpeg_complete(data):
        # libjpeg fills a truncated scan with grey and only warns; a half frame would
        # give confident nonsense, so refuse it.
        raise InvalidImage("jpeg data is truncated")
    return apply_orientation(img if jpeg else to_rgb8(img), header.orientation)


def decode_image(data: bytes | bytearray | memoryview, max_pixels: int) -> np.ndarray:
    """Decode ``data`` to an HxWx3 RGB uint8 array at full size (``probe`` says what it raises)."""
    data, header = probe(data, max_pixels)
    return decode_pixels(data, header)


def _jpeg_complete(data: bytes) -> bool:
    """A complete JPEG ends with an EOI marker (some encoders pad a few bytes after it)."""
    return b"\xff\xd9" in data[-64:]
