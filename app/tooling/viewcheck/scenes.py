"""Real photos for the view-check test set: camera views cut from COCO images, and people
cut from ultralytics' bus.jpg / zidane.jpg and from COCO's labelled persons.

Why real photos: the checks judge structure, sharpness and colour, and flat synthetic
pictures would flatter every one of them. Nothing here downloads; the COCO folder is
passed in (the report's ``--dataset``, the tests' ``dataset`` fixture) and the two
ultralytics images are found next to the installed package without importing it (no torch).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import cv2
import numpy as np

# People in ultralytics' assets as (file, x1, y1, x2, y2) in pixels of the full image.
ASSET_PEOPLE = (
    ("bus.jpg", 50, 395, 248, 903),
    ("bus.jpg", 222, 405, 345, 860),
    ("bus.jpg", 668, 385, 810, 880),
    ("zidane.jpg", 747, 40, 1142, 711),
    ("zidane.jpg", 123, 197, 712, 714),
)
HAND_BOX = ("zidane.jpg", 955, 405, 1095, 495)  # the back of the pointing hand


@dataclass(frozen=True)
class Sprite:
    """A person cut from a photo: BGR pixels and a soft elliptical alpha (0..1)."""

    bgr: np.ndarray
    alpha: np.ndarray

    @property
    def aspect(self) -> float:
        return self.bgr.shape[1] / self.bgr.shape[0]


def asset_path(name: str) -> Path:
    """Path of an image shipped inside the installed ultralytics package."""
    spec = importlib.util.find_spec("ultralytics")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("ultralytics is not installed: its bus.jpg / zidane.jpg are needed")
    path = Path(spec.origin).parent / "assets" / name
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found")
    return path


@lru_cache(maxsize=8)
def read_image(path: Path) -> np.ndarray:
    img = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if img is None:
        raise FileNotFoundError(f"cannot read image {path}")
    img.setflags(write=False)
    return img


def coco_images(dataset: Path) -> list[Path]:
    """The dataset's images in name order (the order fixes which sequences are set aside)."""
    images = sorted((Path(dataset) / "images").glob("*.jpg"))
    if not images:
        raise FileNotFoundError(f"no images under {dataset}/images")
    return images


def soft_ellipse(h: int, w: int) -> np.ndarray:
    """Alpha that is 1 inside an ellipse and fades out towards the box edge (no hard seams)."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    r = np.sqrt(((xx + 0.5) / w * 2 - 1) ** 2 + ((yy + 0.5) / h * 2 - 1) ** 2)
    return np.clip((1.05 - r) / 0.25, 0.0, 1.0).astype(np.float32)


def _sprite(img: np.ndarray, x1: int, y1: int, x2: int, y2: int) -> Sprite:
    crop = np.ascontiguousarray(img[y1:y2, x1:x2])
    return Sprite(crop, soft_ellipse(*crop.shape[:2]))


@lru_cache(maxsize=4)
def people(dataset: Path | None = None, limit: int = 16) -> tuple[Sprite, ...]:
    """The asset people, then tall COCO persons (box at least 35 % of the image height)."""
    out = [_sprite(read_image(asset_path(name)), *box) for name, *box in ASSET_PEOPLE]
    if dataset is not None:
        for image in coco_images(dataset):
            labels = Path(dataset) / "labels" / (image.stem + ".txt")
            if not labels.is_file():
                continue
            img = read_image(image)
            h, w = img.shape[:2]
            for line in labels.read_text().splitlines():
                parts = line.split()
                if len(parts) != 5 or parts[0] != "0":
                    continue
                cx, cy, bw, bh = (float(v) for v in parts[1:])
                if bh < 0.35 or bw * w < 40 or bw / bh > 0.8:
                    continue
                x1, y1 = max(0, int((cx - bw / 2) * w)), max(0, int((cy - bh / 2) * h))
                x2, y2 = min(w, int((cx + bw / 2) * w)), min(h, int((cy + bh / 2) * h))
                out.append(_sprite(img, x1, y1, x2, y2))
                if len(out) >= limit:
                    return tuple(out)
    return tuple(out)


@lru_cache(maxsize=1)
def hand() -> np.ndarray:
    name, x1, y1, x2, y2 = HAND_BOX
    return np.ascontiguousarray(read_image(asset_path(name))[y1:y2, x1:x2])


def paste(frame: np.ndarray, sprite: Sprite, cx: float, foot: float, height: float
          ) -> tuple[float, float, float, float] | None:
    """Draw ``sprite`` in place, centred on ``cx`` with its feet at ``foot`` and ``height``
    pixels tall; return its visible box normalised (x1, y1, x2, y2), or None if off-frame."""
    fh, fw = frame.shape[:2]
    h = max(2, int(round(height)))
    w = max(2, int(round(h * sprite.aspect)))
    x1, y1 = int(round(cx - w / 2)), int(round(foot - h))
    ax1, ay1, ax2, ay2 = max(0, x1), max(0, y1), min(fw, x1 + w), min(fh, y1 + h)
    if ax2 - ax1 < 2 or ay2 - ay1 < 2:
        return None
    # scale only the visible part (a person at the lens is far larger than the frame)
    sx, sy = sprite.bgr.shape[1] / w, sprite.bgr.shape[0] / h
    m = np.array([[sx, 0, (ax1 - x1) * sx], [0, sy, (ay1 - y1) * sy]], np.float32)
    size = (ax2 - ax1, ay2 - ay1)
    flags = cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP
    bgr = cv2.warpAffine(sprite.bgr, m, size, flags=flags, borderMode=cv2.BORDER_REPLICATE)
    alpha = cv2.warpAffine(sprite.alpha, m, size, flags=flags, borderMode=cv2.BORDER_CONSTANT)[..., None]
    region = frame[ay1:ay2, ax1:ax2]
    region[:] = (region * (1 - alpha) + bgr * alpha).astype(np.uint8)
    return ax1 / fw, ay1 / fh, ax2 / fw, ay2 / fh


@dataclass(frozen=True)
class View:
    """A fixed camera looking at part of a photo: the crop window's centre, width and angle.

    The window is about half the photo, so moving the camera by 30 % of the view width or
    rotating it by 10 degrees still shows real picture, not a border."""

    source: np.ndarray
    cx: float
    cy: float
    width: float
    out: tuple[int, int] = (320, 240)

    @classmethod
    def of(cls, source: np.ndarray, out: tuple[int, int] = (320, 240)) -> View:
        h, w = source.shape[:2]
        width = 0.55 * min(w, h * out[0] / out[1])
        return cls(source, w / 2, h / 2, width, out)

    def render(self, dx: float = 0.0, dy: float = 0.0, angle: float = 0.0) -> np.ndarray:
        """The view with the camera panned by (dx, dy) view widths and rolled by ``angle`` degrees."""
        scale = self.out[0] / self.width
        cx, cy = self.cx + dx * self.width, self.cy + dy * self.width
        m = cv2.getRotationMatrix2D((cx, cy), angle, scale)
        m[0, 2] += self.out[0] / 2 - cx
        m[1, 2] += self.out[1] / 2 - cy
        return cv2.warpAffine(self.source, m, self.out, flags=cv2.INTER_LINEAR,
                              borderMode=cv2.BORDER_REFLECT)
