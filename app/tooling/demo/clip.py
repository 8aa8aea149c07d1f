"""Short H.264 clips of a real person walking across a real scene: the demo camera and the stream tests.

Why a generated clip and not a synthetic pattern: the real model must find the person
(a crop of ultralytics' ``bus.jpg``, which ships with the ultralytics package) and the
rules must see him cross a counting line and walk into a zone. The clip is encoded by
ffmpeg (libx264) from raw frames piped in, with a fixed key-frame interval (RTSP clients
join at a key frame) and no B-frames (what IP cameras send).

``WalkClip.person_box(i)`` says where the person is in frame ``i`` (normalized), so a test
or the demo's site file can place a counting line the walk crosses without guessing.
``street_background`` builds a scene without people from ``bus.jpg`` itself (its facade
above its pavement), so the demo needs nothing beyond what the package already has.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

# The leftmost man in bus.jpg (810x1080), as the real yolov8n finds him (conf 0.90),
# with a few pixels of margin: [x0, y0, x1, y1].
BUS_PERSON_BOX = (44, 388, 254, 910)


@dataclass(frozen=True)
class WalkClip:
    """A generated clip: where it is and how the person moves through it."""

    path: Path
    width: int
    height: int
    fps: int
    frames: int
    person_w: int
    person_h: int
    x_start: int
    x_end: int
    y_top: int

    def person_x(self, index: int) -> int:
        """Left edge (pixels) of the person in frame ``index`` (a linear walk, then it loops)."""
        t = (index % self.frames) / max(1, self.frames - 1)
        return round(self.x_start + t * (self.x_end - self.x_start))

    def person_box(self, index: int) -> tuple[float, float, float, float]:
        """Normalized [x0, y0, x1, y1] of the pasted person in frame ``index``."""
        x = self.person_x(index)
        return (x / self.width, self.y_top / self.height,
                (x + self.person_w) / self.width, (self.y_top + self.person_h) / self.height)


def _person_sprite(person_image: Path, height: int) -> tuple[np.ndarray, np.ndarray]:
    """The person crop scaled to ``height`` and a feathered alpha mask (no hard rectangle edge)."""
    img = cv2.imread(str(person_image), cv2.IMREAD_COLOR)
    if img is None:
        raise ValueError(f"cannot read {person_image}")
    x0, y0, x1, y1 = BUS_PERSON_BOX
    crop = img[y0:y1, x0:x1]
    scale = height / crop.shape[0]
    crop = cv2.resize(crop, (max(2, round(crop.shape[1] * scale)), height), interpolation=cv2.INTER_AREA)
    h, w = crop.shape[:2]
    mask = np.zeros((h, w), np.float32)
    cv2.ellipse(mask, (w // 2, h // 2), (int(w * 0.48), int(h * 0.49)), 0, 0, 360, 1.0, -1)
    feathered = cv2.GaussianBlur(mask, (0, 0), sigmaX=max(1.0, w / 20))
    return crop.astype(np.float32), feathered[..., None]


def make_walk_clip(out: Path, background: Path, person_image: Path, *, width: int = 640, height: int = 360,
                   fps: int = 15, seconds: float = 8.0, gop: int | None = None, bitrate: str | None = None,
                   noise: int = 0, walk: tuple[float, float] | None = None) -> WalkClip:
    """Write an H.264 MP4 of the person walking left to right across ``background``.

    ``gop``: key-frame interval in frames (default: one per second). ``noise``: temporal
    sensor noise (ffmpeg's ``noise`` filter strength) so a benchmark clip has a camera's
    bitrate rather than a still image's. ``bitrate``: e.g. ``"4M"`` (default: CRF 23).
    ``walk``: where the person's centre starts and ends, as fractions of the width (default:
    from just inside the left edge to just inside the right). A slower walk keeps consecutive
    boxes overlapping when detection gets only a frame every second or two (the tracker
    links a person across frames by the overlap of his boxes).
    """
    bg = cv2.imread(str(background), cv2.IMREAD_COLOR)
    if bg is None:
        raise ValueError(f"cannot read {background}")
    bg = cv2.resize(bg, (width, height), interpolation=cv2.INTER_AREA).astype(np.float32)
    sprite, alpha = _person_sprite(person_image, height=int(height * 0.62))
    ph, pw = sprite.shape[:2]
    frames = max(2, round(seconds * fps))
    x_start, x_end = (-pw // 3, width - 2 * pw // 3) if walk is None else (
        round(walk[0] * width - pw / 2), round(walk[1] * width - pw / 2))
    clip = WalkClip(out, width, height, fps, frames, pw, ph, x_start=x_start, x_end=x_end,
                    y_top=height - ph - height // 20)
    vf = f"noise=alls={noise}:allf=t,format=yuv420p" if noise else "format=yuv420p"
    rate = ["-b:v", bitrate, "-maxrate", bitrate, "-bufsize", bitrate] if bitrate else ["-crf", "23"]
    cmd = ["ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin", "-y",
           "-f", "rawvideo", "-pix_fmt", "bgr24", "-s", f"{width}x{height}", "-r", str(fps), "-i", "pipe:0",
           "-vf", vf, "-c:v", "libx264", "-preset", "veryfast", *rate,
           "-g", str(gop or fps), "-keyint_min", str(gop or fps), "-bf", "0", "-movflags", "+faststart",
           "-an", str(out)]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stderr is not None  # both are PIPE
    try:
        for index in range(frames):
            proc.stdin.write(_compose(bg, sprite, alpha, clip.person_x(index), clip.y_top).tobytes())
        proc.stdin.close()
        err = proc.stderr.read().decode(errors="replace")
        if proc.wait(60) != 0:
            raise RuntimeError(f"ffmpeg could not encode the clip: {err[-2000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return clip


def _compose(bg: np.ndarray, sprite: np.ndarray, alpha: np.ndarray, x: int, y: int) -> np.ndarray:
    """The background with the sprite alpha-blended at (x, y), clipped at the frame edges."""
    frame = bg.copy()
    h, w = sprite.shape[:2]
    fx0, fx1 = max(0, x), min(frame.shape[1], x + w)
    if fx1 > fx0:
        sx0, sx1 = fx0 - x, fx1 - x
        a = alpha[:, sx0:sx1]
        region = frame[y:y + h, fx0:fx1]
        frame[y:y + h, fx0:fx1] = region * (1 - a) + sprite[:, sx0:sx1] * a
    return frame.clip(0, 255).astype(np.uint8)


def bus_jpg() -> Path:
    """ultralytics' own sample photo (shipped inside the package, no download)."""
    import ultralytics

    return Path(ultralytics.__file__).parent / "assets" / "bus.jpg"


# Rows of bus.jpg (810x1080) without people: the facade above the bus, the pavement below the feet.
FACADE_ROWS, PAVEMENT_ROWS = (0, 230), (920, 1080)


def street_background(out: Path, person_image: Path | None = None, width: int = 640, height: int = 360) -> Path:
    """A scene without people made of ``bus.jpg``'s facade (top 45 %) and pavement (the rest),
    written to ``out`` (PNG)."""
    image = cv2.imread(str(person_image or bus_jpg()), cv2.IMREAD_COLOR)
    if image is None:
        raise ValueError(f"cannot read {person_image or bus_jpg()}")
    top_h = int(height * 0.45)
    top = cv2.resize(image[slice(*FACADE_ROWS)], (width, top_h), interpolation=cv2.INTER_AREA)
    bottom = cv2.resize(image[slice(*PAVEMENT_ROWS)], (width, height - top_h), interpolation=cv2.INTER_AREA)
    out.parent.mkdir(parents=True, exist_ok=True)
    if not cv2.imwrite(str(out), np.vstack([top, bottom])):
        raise OSError(f"cannot write {out}")
    return out
