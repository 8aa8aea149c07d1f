"""Has the camera moved? Phase correlation against the reference, over a grid of rotations.

Why this way: phase correlation finds a shift of any size up to half the picture with two
small FFTs, whatever the light; a camera knocked sideways also rolls, so the reference is
pre-rotated to a few angles (and transformed) once, when it is learned, leaving one FFT
of the current view plus one product and inverse FFT per angle. The best candidates are
then verified: the reference moved by the estimate must match the current view (a crowd
or a truck in front of the camera does not line up with a moved reference, so it is not
"moved"). The check only runs this search when the view no longer matches the reference
as it stands (``still`` below a gate), so a healthy view costs one correlation.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

ANGLES = (0.0, -1.5, 1.5, -3.0, 3.0, -4.5, 4.5, -6.0, 6.0, -8.0, 8.0, -10.0, 10.0, -12.0, 12.0)
MOTION_W = 80
VERIFY = 3  # candidates (best peaks) verified by correlation
HIGHPASS_SIGMA = 4.0  # pixels at MOTION_W: what "fine structure" keeps


@dataclass(frozen=True)
class Motion:
    dx: float  # shift as a fraction of the picture width (+ = content moved right)
    dy: float  # shift as a fraction of the picture width (+ = content moved down)
    angle: float  # degrees, counter-clockwise
    aligned: float  # correlation of the moved reference with the view, over their overlap
    still: float  # correlation of the reference as it stands with the view

    @property
    def shift(self) -> float:
        return float(np.hypot(self.dx, self.dy))


def ncc(a: np.ndarray, b: np.ndarray, weight: np.ndarray) -> float:
    """Weighted normalised cross-correlation of two pictures (weight 0 = ignored pixel)."""
    total = float(weight.sum())
    if total < 0.05 * weight.size:
        return 0.0
    ma, mb = float((a * weight).sum() / total), float((b * weight).sum() / total)
    da, db = a - ma, b - mb
    wa = da * weight
    den = float(np.sqrt(float((wa * da).sum()) * float((db * db * weight).sum())))
    return float((wa * db).sum()) / den if den > 1e-6 else 0.0


def _rotation(size: tuple[int, int], angle: float, dx: float = 0.0, dy: float = 0.0) -> np.ndarray:
    w, h = size
    m = cv2.getRotationMatrix2D((w / 2 - 0.5, h / 2 - 0.5), angle, 1.0)
    m[0, 2] += dx
    m[1, 2] += dy
    return m


def _peak(surface: np.ndarray) -> tuple[float, float, float]:
    """Location (wrapped to +-half size, sub-pixel) and height of the correlation peak."""
    h, w = surface.shape
    _, top, _, (x, y) = cv2.minMaxLoc(surface)
    ys, xs = [(y - 1) % h, y, (y + 1) % h], [(x - 1) % w, x, (x + 1) % w]
    patch = np.maximum(surface[np.ix_(ys, xs)], 0)
    total = float(patch.sum()) or 1.0
    fx = x + float((patch.sum(axis=0) * np.array([-1, 0, 1])).sum()) / total
    fy = y + float((patch.sum(axis=1) * np.array([-1, 0, 1])).sum()) / total
    fx = fx - w if fx > w / 2 else fx
    fy = fy - h if fy > h / 2 else fy
    return fx, fy, float(top)


def highpass(img: np.ndarray) -> np.ndarray:
    return img - cv2.GaussianBlur(img, (0, 0), HIGHPASS_SIGMA)


def _phase_spectrum(img: np.ndarray) -> np.ndarray:
    """The picture's spectrum with unit magnitude (phase only): the product of two such
    spectra is the normalised cross-power spectrum of phase correlation, with no division
    per candidate."""
    spectrum = cv2.dft(img, flags=cv2.DFT_COMPLEX_OUTPUT)
    magnitude = cv2.magnitude(spectrum[..., 0], spectrum[..., 1]) + 1e-6
    return spectrum / magnitude[..., None]


class MotionReference:
    """The reference at MOTION_W wide, pre-rotated to every angle of ANGLES, with spectra."""

    def __init__(self, grey: np.ndarray):
        h = max(2, int(round(MOTION_W * grey.shape[0] / grey.shape[1])))
        self.size = (MOTION_W, h)
        self.image = self.shrink(grey)
        self.window = cv2.createHanningWindow(self.size, cv2.CV_32F)
        self.spectra = []
        for angle in ANGLES:
            rotated = cv2.warpAffine(self.image, _rotation(self.size, angle), self.size, flags=cv2.INTER_LINEAR,
                                     borderMode=cv2.BORDER_REFLECT)
            self.spectra.append(_phase_spectrum((rotated - rotated.mean()) * self.window))
        self._ones = np.ones((h, MOTION_W), np.float32)
        self.fine = highpass(self.image)

    def shrink(self, grey: np.ndarray) -> np.ndarray:
        return cv2.resize(grey, self.size, interpolation=cv2.INTER_AREA).astype(np.float32)

    def still(self, current: np.ndarray, weight: np.ndarray) -> float:
        """How well the reference as it stands matches ``current`` (MOTION_W wide)."""
        return ncc(self.image, current, weight)

    def structure(self, current: np.ndarray, weight: np.ndarray) -> float:
        """How well the reference's fine structure (the picture less its smooth layout:
        edges, textures) matches ``current``'s. A scene seen elsewhere keeps some of the
        smooth layout (sky above, ground below), but none of this."""
        return ncc(self.fine, highpass(current), weight)

    def aligned(self, current: np.ndarray, weight: np.ndarray, angle: float, dx: float, dy: float) -> float:
        m = _rotation(self.size, angle, dx, dy)
        moved = cv2.warpAffine(self.image, m, self.size, flags=cv2.INTER_LINEAR)
        inside = cv2.warpAffine(self._ones, m, self.size, flags=cv2.INTER_NEAREST)
        return ncc(moved, current, weight * inside)

    def estimate(self, current: np.ndarray, weight: np.ndarray, still: float | None = None) -> Motion:
        """The (shift, angle) that best explains the current view, verified by correlation."""
        spectrum = _phase_spectrum((current - current.mean()) * self.window)
        peaks = []
        for angle, ref in zip(ANGLES, self.spectra, strict=True):  # one spectrum per angle
            cross = cv2.mulSpectrums(spectrum, ref, 0, conjB=True)
            surface = cv2.idft(cross, flags=cv2.DFT_REAL_OUTPUT | cv2.DFT_SCALE)
            peaks.append((cv2.minMaxLoc(surface)[1], angle, surface))
        peaks.sort(key=lambda p: p[0], reverse=True)
        best = (-2.0, 0.0, 0.0, 0.0)
        for _, angle, surface in peaks[:VERIFY]:
            dx, dy, _ = _peak(surface)
            best = max(best, (self.aligned(current, weight, angle, dx, dy), angle, dx, dy))
        score, angle, dx, dy = best
        w = self.size[0]
        return Motion(dx / w, dy / w, angle, score, self.still(current, weight) if still is None else still)
