"""The model input size: one fixed shape per deployment, N (square) or (height, width)."""

from __future__ import annotations

ImgSize = int | tuple[int, int]


def parse_imgsz(value: object) -> ImgSize:
    """640, "640" -> 640 (square); "384x640", "384,640", [384, 640] -> (384, 640) as (height, width).

    One fixed shape per deployment either way; a rectangle matching the cameras' aspect
    (384x640 for 16:9) spends no compute on padding.
    """
    if isinstance(value, bool):
        raise ValueError("imgsz must be a size such as 640 or 384x640")
    if isinstance(value, int):
        nums = [value]
    elif isinstance(value, str):
        parts = [p for p in value.strip().lower().replace("x", ",").split(",") if p.strip()]
        try:
            nums = [int(p) for p in parts]
        except ValueError:
            raise ValueError(f"imgsz must be N or HxW, got {value!r}") from None
    elif isinstance(value, (list, tuple)):
        nums = [int(v) for v in value]
    else:
        raise ValueError(f"imgsz must be N or HxW, got {value!r}")
    if len(nums) == 2 and nums[0] == nums[1]:
        nums = nums[:1]
    if len(nums) == 1:
        return nums[0]
    if len(nums) == 2:
        return (nums[0], nums[1])
    raise ValueError(f"imgsz must be N or HxW, got {value!r}")


def input_hw(imgsz: ImgSize) -> tuple[int, int]:
    """(height, width) of the model input."""
    return (imgsz, imgsz) if isinstance(imgsz, int) else (int(imgsz[0]), int(imgsz[1]))


def format_imgsz(imgsz: ImgSize) -> str:
    h, w = input_hw(imgsz)
    return str(h) if h == w else f"{h}x{w}"
