"""The host letterbox's steps as torch ops, for frames decoded on the model's device.

Same geometry as ``preprocess.letterbox`` (``placement``: scale, resized size, centred padding
of 114), same resize (area-averaged by the largest of 2, 4 or 8 the shrink allows, then
bilinear with half-pixel centres, as cv2's INTER_AREA and INTER_LINEAR), rounded to uint8
after each step as OpenCV's uint8 arithmetic is. Boxes therefore map back through the same
``Letterbox``; pixels differ from the host's by OpenCV's fixed-point rounding and libjpeg's
IDCT against the device's (tests/unit/test_device_decode.py bounds the difference).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from app.inference.vision.preprocess import Placement, area_factor


def upright(frame: torch.Tensor, orientation: int) -> torch.Tensor:
    """CHW pixels turned as EXIF orientation 1..8 says (``decode.apply_orientation`` on HWC)."""
    if orientation == 2:
        return frame.flip(2)
    if orientation == 3:
        return frame.flip(1, 2)
    if orientation == 4:
        return frame.flip(1)
    if orientation == 5:
        return frame.transpose(1, 2)
    if orientation == 6:
        return torch.rot90(frame, -1, (1, 2))
    if orientation == 7:
        return frame.flip(1, 2).transpose(1, 2)
    if orientation == 8:
        return torch.rot90(frame, 1, (1, 2))
    return frame


def _to_u8(x: torch.Tensor) -> torch.Tensor:
    return x.round_().clamp_(0, 255).to(torch.uint8)


def shrink(frame: torch.Tensor, factor: int) -> torch.Tensor:
    """uint8 CHW area-averaged by ``factor`` to ceil(side / factor): the size libjpeg-turbo's DCT
    scaling would have decoded it at (the host's reduced decode, and its evidence frame)."""
    if factor <= 1:
        return frame
    height, width = frame.shape[1:]
    if height % factor or width % factor:  # partial blocks at the edges: area windows (adaptive pooling)
        size = (-(-height // factor), -(-width // factor))
        return _to_u8(F.interpolate(frame[None].float(), size=size, mode="area"))[0]
    # whole blocks (1080p, 4K, 720p by 2, 4 or 8): the mean of strided slices, several times
    # faster than pooling on a CPU and the same sums
    x = frame.float()
    rows = sum((x[:, k::factor] for k in range(1, factor)), x[:, 0::factor])
    block = sum((rows[:, :, k::factor] for k in range(1, factor)), rows[:, :, 0::factor])
    return _to_u8(block.mul_(1.0 / (factor * factor)))


def resize(frame: torch.Tensor, new_w: int, new_h: int) -> torch.Tensor:
    """uint8 CHW to ``new_w`` x ``new_h`` as ``preprocess.resize`` does it on the host."""
    height, width = frame.shape[1:]
    frame = shrink(frame, area_factor(width, height, new_w, new_h))
    if tuple(frame.shape[1:]) == (new_h, new_w):
        return frame
    return _to_u8(F.interpolate(frame[None].float(), size=(new_h, new_w), mode="bilinear", align_corners=False))[0]


def letterbox_into(slot: torch.Tensor, frame: torch.Tensor, place: Placement) -> None:
    """Write upright uint8 CHW ``frame`` into ``slot`` (3, H, W), already filled with the pad value."""
    if (frame.shape[2], frame.shape[1]) != (place.new_w, place.new_h):
        frame = resize(frame, place.new_w, place.new_h)
    slot[:, place.top:place.top + place.new_h, place.left:place.left + place.new_w] = frame


def to_host(frame: torch.Tensor) -> np.ndarray:
    """uint8 CHW on any device -> HWC RGB array on the host (what the rules and console keep)."""
    return frame.permute(1, 2, 0).contiguous().cpu().numpy()
