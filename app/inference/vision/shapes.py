"""A small set of fixed input shapes, one per aspect class, and which one a frame goes to.

The migration's lesson stands: no dynamic shapes. But one square shape for every camera
spends 40% of a 16:9 frame's compute on grey padding, so a deployment may declare a few
fixed shapes (e.g. 384x640 for 16:9, 480x640 for 4:3, 640x384 for portrait), each exported
and warmed once; every frame goes to the shape that keeps the most of its pixels, and the
smallest such canvas among equals, and batches never mix shapes.
"""

from __future__ import annotations

from collections.abc import Iterable

from app.core.imgsz import ImgSize, format_imgsz, input_hw, parse_imgsz

Shape = tuple[int, int]  # (height, width), multiples of the stride
STRIDE = 32
_EQUAL = 0.99  # image areas within 1% count as equal (rounding to the stride)


def aspect_shape(width: int, height: int, long_side: int = 640, stride: int = STRIDE) -> Shape:
    """The aspect class of a ``width`` x ``height`` camera at ``long_side``: the short side is
    rounded up to the stride (1920x1080 -> 384x640, 1280x960 -> 480x640, 1080x1920 -> 640x384)."""
    if width <= 0 or height <= 0:
        raise ValueError(f"a resolution needs positive sides, got {width}x{height}")
    short = -(-round(long_side * min(width, height) / max(width, height)) // stride) * stride
    short = max(stride, min(long_side, short))
    return (short, long_side) if width >= height else (long_side, short)


def letterbox_scale(width: int, height: int, shape: Shape) -> float:
    return min(shape[0] / height, shape[1] / width)


def choose_shape(width: int, height: int, shapes: Iterable[Shape]) -> Shape:
    """The shape that keeps the most of the frame (the largest letterboxed image), and
    among those the smallest canvas (the least padding). Deterministic: ties keep the
    order given."""
    options = [(letterbox_scale(width, height, shape) ** 2, shape[0] * shape[1], i, shape)
               for i, shape in enumerate(shapes)]
    if not options:
        raise ValueError("no input shapes configured")
    kept = max(area for area, *_ in options)
    return min((canvas, i, shape) for area, canvas, i, shape in options if area >= kept * _EQUAL)[2]


def parse_shapes(value: object, primary: ImgSize) -> tuple[Shape, ...]:
    """'384x640,480x640' (or a list) -> shapes in order, the primary ``imgsz`` first and no
    duplicates. Empty means the primary shape alone."""
    items: list[object]
    if value is None or (isinstance(value, str) and not value.strip()):
        items = []
    elif isinstance(value, str):
        items = [part for part in value.replace(";", ",").split(",") if part.strip()] if "x" in value.lower() \
            else [value]
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        raise ValueError(f"shapes must be a comma list of HxW, got {value!r}")
    out: list[Shape] = [input_hw(primary)]
    for item in items:
        hw = input_hw(parse_imgsz(item))
        for side in hw:
            if not 32 <= side <= 4096 or side % STRIDE:
                raise ValueError(f"shape {format_imgsz(hw)}: sides must be multiples of {STRIDE} within 32..4096")
        if hw not in out:
            out.append(hw)
    return tuple(out)


def site_shapes(resolutions: Iterable[tuple[int, int]], primary: ImgSize) -> tuple[Shape, ...]:
    """``SHAPES=auto``: the primary shape plus the aspect class of each camera resolution
    (width, height) the site file declares, at the primary shape's long side."""
    long_side = max(input_hw(primary))
    return parse_shapes([aspect_shape(w, h, long_side) for w, h in resolutions], primary)


def describe(shapes: Iterable[Shape]) -> str:
    return ",".join(format_imgsz(s) for s in shapes)
