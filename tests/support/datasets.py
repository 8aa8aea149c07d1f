"""A small YOLO-format dataset from the shared validation images, for the export, eval, int8 and OpenVINO tests."""

from __future__ import annotations

import shutil
from pathlib import Path


def make_dataset(root: Path, source: Path, n: int = 2) -> Path:
    (root / "images").mkdir(parents=True)
    (root / "labels").mkdir()
    for image in sorted((source / "images").iterdir())[:n]:
        shutil.copy(image, root / "images" / image.name)
        label = source / "labels" / f"{image.stem}.txt"
        if label.is_file():
            shutil.copy(label, root / "labels" / label.name)
    shutil.copy(source / "data.yaml", root / "data.yaml")
    return root
