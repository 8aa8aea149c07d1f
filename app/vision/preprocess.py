"""Letterbox every frame to one fixed square shape.

One shape for every request is a lesson of the ROCm migration: dynamic input shapes made
the allocator cache grow until OOM. The ``Letterbox`` transform is kept per image so
boxes can be mapped back to original pixels. The arithmetic matches Ultralytics'
``LetterBox`` (centred padding, value 114, bilinear resize) so accuracy matches its
reference pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

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


def letterbox(img: np.ndarray, size: int) -> tuple[np.ndarray, Letterbox]:
    """Resize keeping aspect ratio and pad to ``size``x``size``; returns HWC uint8."""
    h, w = img.shape[:2]
    scale = min(size / h, size / w)
    new_w, new_h = int(round(w * scale)), int(round(h * scale))
    if (new_w, new_h) != (w, h):
        img = cv2.resize(img, (new_w, new_h), interpolation=cv2.INTER_LINEAR)
    dw, dh = (size - new_w) / 2, (size - new_h) / 2
    top, bottom = int(round(dh - 0.1)), int(round(dh + 0.1))
    left, right = int(round(dw - 0.1)), int(round(dw + 0.1))
    img = cv2.copyMakeBorder(img, top, bottom, left, right, cv2.BORDER_CONSTANT, value=(PAD_VALUE,) * 3)
    return img, Letterbox(scale=scale, pad_x=left, pad_y=top, width=w, height=h)


def to_tensor(img: np.ndarray) -> np.ndarray:
    """HWC uint8 RGB -> CHW float32 in 0..1, contiguous for the runtime."""
    return np.ascontiguousarray(img.transpose(2, 0, 1), dtype=np.float32) * np.float32(1 / 255)


def preprocess(img: np.ndarray, size: int) -> tuple[np.ndarray, Letterbox]:
    """RGB uint8 image -> (CHW float32 model input, its letterbox transform)."""
    boxed, transform = letterbox(img, size)
    return to_tensor(boxed), transform


def stack(tensors: list[np.ndarray]) -> np.ndarray:
    """CHW tensors of one shape -> NCHW batch."""
    return np.ascontiguousarray(np.stack(tensors, axis=0))
