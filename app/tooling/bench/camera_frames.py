"""Camera-like JPEG frames made from real images, for the stage and service benchmarks."""

from __future__ import annotations

from pathlib import Path

import cv2


def camera_jpegs(images: list[Path], size: tuple[int, int], count: int = 8, quality: int = 90) -> list[bytes]:
    """Real images up-scaled (cubic) and centre-cropped to a camera's ``size``, as JPEG."""
    out = []
    width, height = size
    for path in images[:count]:
        img = cv2.imread(str(path))
        if img is None:
            raise ValueError(f"cannot read {path}")
        scale = max(width / img.shape[1], height / img.shape[0])
        big = cv2.resize(img, (round(img.shape[1] * scale), round(img.shape[0] * scale)),
                         interpolation=cv2.INTER_CUBIC)
        top, left = (big.shape[0] - height) // 2, (big.shape[1] - width) // 2
        ok, buf = cv2.imencode(".jpg", big[top:top + height, left:left + width], [cv2.IMWRITE_JPEG_QUALITY, quality])
        out.append(buf.tobytes())
    return out
