"""Short H.264 clips of a real person walking across a real background, for stream tests.

Why a generated clip and not a synthetic pattern: the lead's end-to-end test runs the real
model over the stream and expects a line crossing, so the frames must hold a person the
model finds (a crop of ultralytics' ``bus.jpg``) on a real scene (a COCO image from the
dataset fixture). The clip is encoded by ffmpeg (libx264) from raw frames piped in, with a
fixed key-frame interval (RTSP clients join at a key frame) and no B-frames (what IP
cameras send).

``WalkClip.person_box(i)`` says where the person is in frame ``i`` (normalized), so a
test can place a counting line the walk crosses without guessing.
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
    mask = np.zeros(crop.shape[:2], np.float32)
    h, w = mask.shape
    cv2.ellipse(mask, (w // 2, h // 2), (int(w * 0.48), int(h * 0.49)), 0, 0, 360, 1.0, -1)
    mask = cv2.GaussianBlur(mask, (0, 0), sigmaX=max(1.0, w / 20))
    return crop.astype(np.float32), mask[..., None]


def make_walk_clip(out: Path, background: Path, person_image: Path, *, width: int = 640, height: int = 360,
                   fps: int = 15, seconds: float = 8.0, gop: int | None = None, bitrate: str | None = None,
                   noise: int = 0) -> WalkClip:
    """Write an H.264 MP4 of the person walking left to right across ``background``.

    ``gop``: key-frame interval in frames (default: one per second). ``noise``: temporal
    sensor noise (ffmpeg's ``noise`` filter strength) so a benchmark clip has a camera's
    bitrate rather than a still image's. ``bitrate``: e.g. ``"4M"`` (default: CRF 23).
    """
    bg = cv2.imread(str(background), cv2.IMREAD_COLOR)
    if bg is None:
        raise ValueError(f"cannot read {background}")
    bg = cv2.resize(bg, (width, height), interpolation=cv2.INTER_AREA).astype(np.float32)
    sprite, alpha = _person_sprite(person_image, height=int(height * 0.62))
    ph, pw = sprite.shape[:2]
    frames = max(2, round(seconds * fps))
    clip = WalkClip(out, width, height, fps, frames, pw, ph, x_start=-pw // 3, x_end=width - 2 * pw // 3,
                    y_top=height - ph - height // 20)
    vf = f"noise=alls={noise}:allf=t,format=yuv420p" if noise else "format=yuv420p"
    rate = ["-b:v", bitrate, "-maxrate", bitrate, "-bufsize", bitrate] if bitrate else ["-crf", "23"]
    cmd = ["ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin", "-y",
           "-f", "rawvideo", "-pix_fmt", "bgr24", "-s", f"{width}x{height}", "-r", str(fps), "-i", "pipe:0",
           "-vf", vf, "-c:v", "libx264", "-preset", "veryfast", *rate,
           "-g", str(gop or fps), "-keyint_min", str(gop or fps), "-bf", "0", "-movflags", "+faststart",
           "-an", str(out)]
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stderr=subprocess.PIPE)
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


STREET_CLASSES = {"2", "3", "5", "7"}  # car, motorcycle, bus, truck: a campus road, not a kitchen


def background_without_people(dataset: Path) -> Path:
    """A landscape image of a YOLO-format dataset whose labels hold no person (class 0),
    preferring street scenes, so the only person in a generated clip is the walker."""
    best: tuple[int, str, Path] | None = None
    for label in sorted((Path(dataset) / "labels").rglob("*.txt")):
        classes = {line.split()[0] for line in label.read_text().splitlines() if line.strip()}
        image = Path(str(label.with_suffix(".jpg")).replace("/labels/", "/images/"))
        if not classes or "0" in classes or not image.is_file():
            continue
        shape = cv2.imread(str(image), cv2.IMREAD_REDUCED_GRAYSCALE_8).shape
        if shape[1] <= shape[0]:
            continue
        rank = (-len(classes & STREET_CLASSES), label.name, image)
        best = min(best, rank) if best else rank
    if best is None:
        raise FileNotFoundError(f"no landscape image without people in {dataset}")
    return best[2]
