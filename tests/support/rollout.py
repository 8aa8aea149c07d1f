"""What the rollout tests share (issue 41 part 4): a site file whose two cameras use the default
model; the labelled set a candidate with other classes is judged on; and live frames: real
coco-val128 JPEGs posted as those cameras, in a background thread while a test watches the
rollout (the server's routes or the console's page)."""

from __future__ import annotations

import itertools
import shutil
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import httpx

# two cameras on the default model (no `model:`): the rollout's canary is one of them
TWO_CAMERAS_SITE = """cameras:
  - id: cam-1
    zones:
      - {name: all, polygon: [[0, 0], [1, 0], [1, 1], [0, 1]], rules: [{type: intrusion, classes: [person]}]}
  - id: cam-2
    zones:
      - {name: all, polygon: [[0, 0], [1, 0], [1, 1], [0, 1]], rules: [{type: intrusion, classes: [person]}]}
"""


def frames_of(dataset: Path, count: int = 48) -> list[bytes]:
    """The first ``count`` JPEGs of a YOLO dataset folder (``images/*.jpg``), as bytes."""
    return [p.read_bytes() for p in sorted((dataset / "images").glob("*.jpg"))[:count]]


def labelled_set(dataset: Path, target: Path, images: int = 16) -> Path:
    """The first ``images`` of ``dataset`` as a YOLO folder of their own (the operator's labelled set,
    CAMPUSGUARD_GATE_DATASET: what a candidate with other classes is judged on)."""
    (target / "images").mkdir(parents=True)
    (target / "labels").mkdir()
    shutil.copy(dataset / "data.yaml", target / "data.yaml")
    for image in sorted((dataset / "images").glob("*.jpg"))[:images]:
        shutil.copy(image, target / "images" / image.name)
        label = dataset / "labels" / f"{image.stem}.txt"
        if label.is_file():
            shutil.copy(label, target / "labels" / label.name)
    return target


class FramePoster:
    """Posts ``frames`` to ``POST /detect?camera_id=`` as ``cameras`` in turn, one every
    ``every_s`` (after the answer), on a thread of its own, until ``stop()``, or until ``limit``
    frames once started with one. Every answer must be a 200: anything else is kept in
    ``failures`` (``stop`` raises on them), so a rollout that broke serving fails its test."""

    def __init__(self, url: str, key: str, frames: Sequence[bytes], cameras: Sequence[str],
                 every_s: float = 0.1) -> None:
        self.url, self.key, self.frames, self.cameras, self.every_s = url, key, frames, cameras, every_s
        self.posted = 0
        self.failures: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, limit: int | None = None, cameras: Sequence[str] | None = None) -> FramePoster:
        self.stop()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, args=(limit, cameras or self.cameras),
                                        name="frame-poster", daemon=True)
        self._thread.start()
        return self

    def wait(self, timeout: float = 120) -> None:
        """Until a start with a ``limit`` has posted its frames."""
        if self._thread is not None:
            self._thread.join(timeout)
            assert not self._thread.is_alive(), f"posting took over {timeout} s"
        assert not self.failures, self.failures[:5]

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)
            self._thread = None
        assert not self.failures, self.failures[:5]

    def _run(self, limit: int | None, cameras: Sequence[str]) -> None:
        pairs = zip(itertools.cycle(self.frames), itertools.cycle(cameras), strict=False)
        with httpx.Client(base_url=self.url, headers={"x-api-key": self.key}, timeout=60) as http:
            for sent, (frame, camera) in enumerate(pairs):
                if self._stop.is_set() or (limit is not None and sent >= limit):
                    return
                try:
                    r = http.post("/detect", params={"camera_id": camera}, content=frame,
                                  headers={"content-type": "image/jpeg"})
                except httpx.HTTPError as exc:
                    self.failures.append(f"{camera}: {exc!r}")
                    return
                if r.status_code != 200:
                    self.failures.append(f"{camera}: {r.status_code} {r.text[:200]}")
                self.posted += 1
                time.sleep(self.every_s)
