"""Letterbox a frame to a fixed input shape (one per aspect class, app.inference.vision.shapes).

One shape for every request is a lesson of the ROCm migration: dynamic input shapes made
the allocator cache grow until OOM. The ``Letterbox`` transform is kept per image so
boxes can be mapped back to original pixels. The arithmetic matches Ultralytics'
``LetterBox`` (centred padding, value 114, bilinear resize up to a 2x shrink) so accuracy matches its
reference pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from app.inference.vision.decode import REDUCTIONS

PAD_VALUE = 114


@dataclass(frozen=True, slots=True)
class Letterbox:
    """How an original image was placed into the square model input."""

    scale: float
    pad_x: int
    pad_y: int
    width: int
    height: int

    def to_original(self, boxes: np.ndarray) -> np.ndarray:
        """Map xyxy boxes from model-input pixels back to original pixels, clipped."""
        out = boxes.astype(np.float32, copy=True)
        out[:, [0, 2]] = ((out[:, [0, 2]] - self.pad_x) / self.scale).clip(0, self.width)
        out[:, [1, 3]] = ((out[:, [1, 3]] - self.pad_y) / self.scale).clip(0, self.height)
        return out


def letterbox(img: np.ndarray, size: int | tuple[int, int],
              original: tuple[int, int] | None = None) -> tuple[np.ndarray, Letterbox]:
    """Resize keeping aspect ratio and pad to ``size`` (N square, or (height, width)); HWC uint8.

    ``original`` (width, height) is the frame's true size when ``img`` was decoded smaller
    (a reduced JPEG decode): the geometry, and so the mapping of boxes back to original
    pixels, is computed from it, exactly as if the full frame had been letterboxed.
    """
    w, h = original or (img.shape[1], img.shape[0])
    place = placement(w, h, size)
    new_w, new_h = place.new_w, place.new_h
    if (new_w, new_h) != (img.shape[1], img.shape[0]):
        img = resize(img, new_w, new_h)
    img = cv2.copyMakeBorder(img, place.top, place.bottom, place.left, place.right, cv2.BORDER_CONSTANT,
                             value=(PAD_VALUE,) * 3)
    return img, place.box


@dataclass(frozen=True, slots=True)
class Placement:
    """Where a ``width`` x ``height`` frame goes in the model input: its resized size and the
    padding on each side (``letterbox`` here, and the device letterbox, place frames alike)."""

    box: Letterbox
    new_w: int
    new_h: int
    top: int
    bottom: int
    left: int
    right: int


def placement(width: int, height: int, size: int | tuple[int, int]) -> Placement:
    """The letterbox geometry of a ``width`` x ``height`` frame in ``size`` (N, or (height, width))."""
    out_h, out_w = (size, size) if isinstance(size, int) else size
    scale = min(out_h / height, out_w / width)
    # A 1x20000 strip scales one side below half a pixel: keep at least one row/column
    # (cv2.resize refuses a zero size), so any shape the decoder accepts gets through.
    new_w, new_h = max(1, int(round(width * scale))), max(1, int(round(height * scale)))
    dw, dh = (out_w - new_w) / 2, (out_h - new_h) / 2
    top, bottom = int(round(dh - 0.1)), int(round(dh + 0.1))
    left, right = int(round(dw - 0.1)), int(round(dw + 0.1))
    return Placement(Letterbox(scale=scale, pad_x=left, pad_y=top, width=width, height=height),
                     new_w, new_h, top, bottom, left, right)


def area_factor(width: int, height: int, new_w: int, new_h: int) -> int:
    """The power of two (8, 4, 2, else 1) a frame is first area-averaged by on its way to
    ``new_w`` x ``new_h`` (``resize``)."""
    return next((r for r in REDUCTIONS if new_w * r <= width and new_h * r <= height), 1)


def resize(img: np.ndarray, new_w: int, new_h: int) -> np.ndarray:
    """Bilinear, as Ultralytics, up to a 2x shrink. Beyond it bilinear reads 4 of every 9+
    pixels and aliases (a full 1080p frame into 640: mAP 0.4166 on up-scaled COCO, 0.4210 this
    way), so the frame is first area-averaged by the largest of 2, 4 or 8 the shrink allows,
    to the size libjpeg-turbo's DCT scaling decodes a JPEG at (decode.py, ``REDUCTIONS``), and
    bilinear does the rest. A full decode and a reduced one then hand the model the same
    picture: the repo's parity command between them 0.986 / 0.983 (recall / precision), where
    one area shrink of the whole way gave 0.975 / 0.978 (docs/benchmarks.md)."""
    height, width = img.shape[:2]
    r = area_factor(width, height, new_w, new_h)
    if r > 1:
        img = cv2.resize(img, (-(-width // r), -(-height // r)), interpolation=cv2.INTER_AREA)
    if (new_w, new_h) == (img.shape[1], img.shape[0]):
        return img
    return cv2.resize(img, (new_w, new_h), interpolation=cv2.INTER_LINEAR)


def to_tensor(img: np.ndarray) -> np.ndarray:
    """HWC uint8 RGB -> CHW float32 in 0..1, contiguous for the runtime."""
    return np.ascontiguousarray(img.transpose(2, 0, 1), dtype=np.float32) * np.float32(1 / 255)


def preprocess(img: np.ndarray, size: int | tuple[int, int]) -> tuple[np.ndarray, Letterbox]:
    """RGB uint8 image -> (CHW float32 model input, its letterbox transform)."""
    boxed, transform = letterbox(img, size)
    return to_tensor(boxed), transform


def to_batch(images: list[np.ndarray], out: np.ndarray | None = None) -> np.ndarray:
    """Letterboxed HWC uint8 images -> NCHW float32 in 0..1, written in one pass.

    Converting straight into one (reusable) batch buffer writes each 4.9 MB float frame
    once, instead of once for the float copy and again for ``np.stack``.
    """
    h, w = images[0].shape[:2]
    if out is None:
        out = np.empty((len(images), 3, h, w), np.float32)
    scale = np.float32(1 / 255)
    for i, img in enumerate(images):
        np.multiply(img.transpose(2, 0, 1), scale, out=out[i], casting="unsafe")
    return out


def stack(tensors: list[np.ndarray]) -> np.ndarray:
    """CHW tensors of one shape -> NCHW batch."""
    return np.ascontiguousarray(np.stack(tensors, axis=0))
