"""Clips for the stream tests: the generator is the demo's (app/tooling/demo/clip.py); the
tests put the walker on a COCO street scene of the dataset fixture instead of the demo's.
"""

from __future__ import annotations

from pathlib import Path

import cv2

from app.tooling.demo.clip import BUS_PERSON_BOX, WalkClip, make_walk_clip

__all__ = ["BUS_PERSON_BOX", "WalkClip", "background_without_people", "make_walk_clip"]

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
