"""decode_image: every supported format decodes to RGB uint8; every bad input is a typed error.

Bad input must never crash or hang the worker, so every test here runs under a short
pytest-timeout.
"""

from __future__ import annotations

import struct
import zlib

import cv2
import numpy as np
import pytest

from app.core.errors import ImageTooLarge, InvalidImage, ServiceError, UnsupportedMediaType
from app.inference.vision.decode import decode_image, read_header, sniff_format

pytestmark = pytest.mark.timeout(30)

LIMIT = 40_000_000


def _png_chunk(kind: bytes, payload: bytes) -> bytes:
    return struct.pack(">I", len(payload)) + kind + payload + struct.pack(">I", zlib.crc32(kind + payload) & 0xFFFFFFFF)


def crafted_png(width: int, height: int, bit_depth: int = 8, color_type: int = 2) -> bytes:
    """A tiny, well-formed PNG whose header declares ``width`` x ``height`` pixels.

    The IDAT holds only a few zero bytes: a decoder that trusted the header and allocated
    the frame before checking would need gigabytes for 50000x50000.
    """
    ihdr = struct.pack(">IIBBBBB", width, height, bit_depth, color_type, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr)
            + _png_chunk(b"IDAT", zlib.compress(b"\x00" * 16)) + _png_chunk(b"IEND", b""))


def encode(img: np.ndarray, ext: str) -> bytes:
    """Encode with OpenCV (which takes BGR/BGRA channel order)."""
    ok, buf = cv2.imencode(ext, img)
    assert ok, ext
    return buf.tobytes()


# --- bad input -----------------------------------------------------------------------------

def test_empty_is_invalid_image():
    with pytest.raises(InvalidImage):
        decode_image(b"", LIMIT)


@pytest.mark.parametrize("data", [b"hello world" * 50, b"\x00", b"\xff\xd8" + b"\x00" * 50, b"RIFF\x00\x00\x00\x00WAVE"],
                         ids=["text", "nul", "jpeg-soi-only", "wav"])
def test_garbage_is_invalid_image(data):
    with pytest.raises(InvalidImage):
        decode_image(data, LIMIT)


@pytest.mark.parametrize("data", [b"GIF89a" + b"\x00" * 100, b"%PDF-1.7\n" + b"x" * 200, b"II*\x00" + b"\x00" * 50],
                         ids=["gif", "pdf", "tiff"])
def test_recognised_other_format_is_unsupported_media_type(data):
    with pytest.raises(UnsupportedMediaType):
        decode_image(data, LIMIT)


@pytest.mark.parametrize("data", [
    b"\xff\xd8\xff" + b"garbage" * 20,          # JPEG magic, nothing behind it
    b"\x89PNG\r\n\x1a\n",                        # PNG signature only
    b"\x89PNG\r\n\x1a\n" + b"\x00" * 40,         # PNG signature, broken IHDR
    b"BM" + b"\x00" * 10,                        # BMP magic, short header
    b"RIFF\x10\x00\x00\x00WEBPVP8 " + b"\x00" * 8,  # WebP container, broken bitstream
], ids=["jpeg", "png-signature", "png-broken-ihdr", "bmp", "webp"])
def test_right_magic_wrong_body_is_invalid_image(data):
    with pytest.raises(InvalidImage):
        decode_image(data, LIMIT)


def test_truncated_jpeg_is_invalid_image(bus_jpg):
    half = bus_jpg[: len(bus_jpg) // 2]
    assert sniff_format(half) == "jpeg"
    with pytest.raises(InvalidImage):
        decode_image(half, LIMIT)


def test_truncated_png_is_invalid_image():
    rng = np.random.default_rng(0)
    data = encode(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8), ".png")
    with pytest.raises(InvalidImage):
        decode_image(data[: len(data) // 2], LIMIT)


def test_declared_50000x50000_png_refused_before_allocation():
    data = crafted_png(50000, 50000)
    assert len(data) < 200
    assert read_header(data)[:2] == (50000, 50000)
    with pytest.raises(ImageTooLarge) as info:
        decode_image(data, LIMIT)
    assert "50000x50000" in info.value.message and str(LIMIT) in info.value.message


def test_pixel_limit_is_ours_not_pillows():
    """Just over a small configured limit is refused; under it passes the size check."""
    img = np.zeros((10, 11, 3), np.uint8)
    data = encode(img, ".png")
    with pytest.raises(ImageTooLarge):
        decode_image(data, 109)
    assert decode_image(data, 110).shape == (10, 11, 3)


def test_pixel_limit_above_pillow_bomb_limit_is_respected():
    """A limit above Pillow's own bomb guard (~179 Mpx) must be ours to decide: the size
    check passes and the (tiny, broken) body is then refused as invalid, not too large."""
    with pytest.raises(InvalidImage):
        decode_image(crafted_png(20000, 10000), 300_000_000)


def test_bad_input_never_triggers_a_package_install(monkeypatch):
    """Importing ultralytics patches PIL.Image.open to pip-install pi-heif on an
    unidentified file; an untrusted upload must never reach that path."""
    import ultralytics.utils.checks as checks
    import ultralytics.utils.patches  # noqa: F401 - applies the PIL patch

    calls = []
    monkeypatch.setattr(checks, "check_requirements", lambda *a, **k: calls.append(a))
    for data in (b"\xff\xd8\xff" + b"x" * 100, b"\x89PNG\r\n\x1a\n", b"BM" + b"\x00" * 10):
        with pytest.raises(InvalidImage):
            decode_image(data, LIMIT)
    assert calls == []


def test_every_error_is_a_service_error_with_status():
    for data, status in ((b"", 400), (b"nope" * 10, 400), (b"GIF87a" + bytes(20), 415), (crafted_png(50000, 50000), 413)):
        with pytest.raises(ServiceError) as info:
            decode_image(data, LIMIT)
        assert info.value.status == status


# --- good input ----------------------------------------------------------------------------

def test_bus_jpg_decodes_to_rgb(bus_jpg):
    img = decode_image(bus_jpg, LIMIT)
    assert img.shape == (1080, 810, 3) and img.dtype == np.uint8
    bgr = cv2.imdecode(np.frombuffer(bus_jpg, np.uint8), cv2.IMREAD_COLOR)
    np.testing.assert_array_equal(img, bgr[:, :, ::-1])


def test_one_pixel_image_decodes():
    img = decode_image(encode(np.array([[[10, 20, 30]]], np.uint8), ".png"), LIMIT)
    assert img.shape == (1, 1, 3) and img.dtype == np.uint8
    assert img[0, 0].tolist() == [30, 20, 10]  # BGR in, RGB out


def test_png_16bit_color_is_scaled_to_8bit():
    bgr16 = np.zeros((6, 7, 3), np.uint16)
    bgr16[..., 0], bgr16[..., 1], bgr16[..., 2] = 0x1000, 0x8000, 0xFFFF
    img = decode_image(encode(bgr16, ".png"), LIMIT)
    assert img.dtype == np.uint8 and img.shape == (6, 7, 3)
    assert img[0, 0].tolist() == [0xFF, 0x80, 0x10]


def test_png_16bit_gray():
    img = decode_image(encode(np.full((5, 4), 0x4000, np.uint16), ".png"), LIMIT)
    assert img.dtype == np.uint8 and img.shape == (5, 4, 3)
    assert (img == 0x40).all()


def test_png_rgba_drops_alpha():
    bgra = np.zeros((4, 5, 4), np.uint8)
    bgra[...] = (10, 20, 30, 0)  # fully transparent: colour is kept, alpha dropped
    img = decode_image(encode(bgra, ".png"), LIMIT)
    assert img.shape == (4, 5, 3) and img.dtype == np.uint8
    assert img[0, 0].tolist() == [30, 20, 10]


def test_png_gray():
    img = decode_image(encode(np.full((3, 8), 77, np.uint8), ".png"), LIMIT)
    assert img.shape == (3, 8, 3) and (img == 77).all()


def test_jpeg_gray():
    img = decode_image(encode(np.full((16, 16), 128, np.uint8), ".jpg"), LIMIT)
    assert img.shape == (16, 16, 3) and img.dtype == np.uint8
    assert abs(int(img.mean()) - 128) <= 2


def test_jpeg_cmyk_decodes_to_its_rgb_colours():
    """A CMYK JPEG (print workflows, some NVRs' exports) comes out in its colours, not its
    four ink channels read as BGRA."""
    import io

    from PIL import Image

    out = io.BytesIO()
    Image.new("RGB", (16, 16), (200, 30, 30)).convert("CMYK").save(out, "JPEG", quality=95)
    img = decode_image(out.getvalue(), LIMIT)
    assert img.shape == (16, 16, 3) and img.dtype == np.uint8
    assert np.abs(img.reshape(-1, 3).mean(axis=0) - (200, 30, 30)).max() < 12


def test_bmp():
    bgr = np.zeros((9, 10, 3), np.uint8)
    bgr[:, :5] = (255, 0, 0)  # blue left half
    data = encode(bgr, ".bmp")
    assert sniff_format(data) == "bmp"
    img = decode_image(data, LIMIT)
    assert img.shape == (9, 10, 3)
    assert img[0, 0].tolist() == [0, 0, 255] and img[0, 9].tolist() == [0, 0, 0]


def test_webp():
    bgr = np.zeros((16, 16, 3), np.uint8)
    bgr[...] = (0, 0, 200)  # red
    ok, buf = cv2.imencode(".webp", bgr, [cv2.IMWRITE_WEBP_QUALITY, 101])  # lossless
    assert ok
    data = buf.tobytes()
    assert sniff_format(data) == "webp"
    img = decode_image(data, LIMIT)
    assert img.shape == (16, 16, 3) and img.dtype == np.uint8
    assert img[8, 8].tolist() == [200, 0, 0]


def test_format_is_sniffed_not_trusted_from_extension():
    assert sniff_format(encode(np.zeros((2, 2, 3), np.uint8), ".png")) == "png"
    assert sniff_format(encode(np.zeros((2, 2, 3), np.uint8), ".jpg")) == "jpeg"
    assert sniff_format(b"RIFF\x00\x00\x00\x00WAVE") is None


# --- EXIF orientation ----------------------------------------------------------------------

def with_orientation(rgb: np.ndarray, fmt: str, orientation: int) -> bytes:
    import io

    from PIL import Image

    exif = Image.Exif()
    exif[0x0112] = orientation
    buf = io.BytesIO()
    extra = {"quality": 100, "subsampling": 0} if fmt == "JPEG" else {"lossless": True} if fmt == "WEBP" else {}
    Image.fromarray(rgb).save(buf, fmt, exif=exif.tobytes(), **extra)
    return buf.getvalue()


@pytest.mark.parametrize("fmt", ["JPEG", "WEBP", "PNG"])
@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_applied_like_pillow_and_opencv_imread(fmt, orientation):
    """Phone photos are stored sideways with an EXIF tag; Ultralytics' predict reads them
    with cv2.imread (which turns them upright), so must we, or boxes land elsewhere."""
    import io

    from PIL import Image, ImageOps

    rgb = np.zeros((24, 40, 3), np.uint8)
    rgb[:8, :16] = (250, 0, 0)      # red block top-left
    rgb[16:, 32:] = (0, 0, 250)     # blue block bottom-right
    data = with_orientation(rgb, fmt, orientation)
    ours = decode_image(data, LIMIT)
    upright = np.asarray(ImageOps.exif_transpose(Image.open(io.BytesIO(data))).convert("RGB"))
    assert ours.shape == upright.shape == ((24, 40, 3) if orientation <= 4 else (40, 24, 3))
    assert np.abs(ours.astype(int) - upright).max() <= 8
    imread = cv2.imdecode(np.frombuffer(data, np.uint8), cv2.IMREAD_COLOR)[:, :, ::-1]
    assert np.abs(ours.astype(int) - imread).max() <= 8
    assert ours.flags.c_contiguous
    width, height, got = read_header(data)
    assert (width, height, got) == (40, 24, orientation)


def test_broken_exif_is_ignored():
    data = encode(np.full((4, 6, 3), 9, np.uint8), ".jpg")
    # an APP1 "Exif" segment with a garbage TIFF body right after SOI
    payload = b"Exif\x00\x00" + b"\x13" * 20
    broken = data[:2] + b"\xff\xe1" + struct.pack(">H", len(payload) + 2) + payload + data[2:]
    assert decode_image(broken, LIMIT).shape == (4, 6, 3)


@pytest.mark.parametrize("wrap", [bytearray, memoryview], ids=["bytearray", "memoryview"])
def test_buffer_types_behave_like_bytes(bus_jpg, wrap):
    """Pipeline.prepare accepts bytearray and memoryview; a memoryview once made every
    JPEG look truncated (`in` compares ints there) and crashed on startswith."""
    np.testing.assert_array_equal(decode_image(wrap(bus_jpg), LIMIT), decode_image(bus_jpg, LIMIT))
    with pytest.raises(InvalidImage):
        decode_image(wrap(b"junk" * 10), LIMIT)
    with pytest.raises(UnsupportedMediaType):
        decode_image(wrap(b"GIF89a" + bytes(20)), LIMIT)
    with pytest.raises(InvalidImage):
        decode_image(wrap(bus_jpg[: len(bus_jpg) // 2]), LIMIT)
    with pytest.raises(InvalidImage):
        decode_image(wrap(b""), LIMIT)
