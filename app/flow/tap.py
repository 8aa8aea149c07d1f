"""``Tap``: what a rollout (app/flow/rollout.py) sees of the frames one engine answers.

The frame flow tells its tap of each answer, after it is given, and of each failure; the
router (app/flow/models.py) hands a frame's flow the tap of the side that answers it. Without
a rollout of the model the tap is ``NO_TAP``.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from app.inference.engine import DetectResult
from app.inference.pipeline import DetectParams, Keep


class Tap(Protocol):
    """A rollout's view of the frames one engine answered (app/inference/shadow/candidate.py ``Tap``):
    told of each answer after it is given (with what of the frame the caller kept: it decides how far
    the JPEG decode may reduce it, so the other side must decode it alike) and of each failure; never blocks."""

    def answered(self, camera_id: str | None, data: bytes | np.ndarray, params: DetectParams, keep: Keep,
                 result: DetectResult) -> None: ...

    def failed(self, camera_id: str | None, exc: BaseException) -> None: ...


class NoTap:
    """No rollout of the frame's model."""

    def answered(self, camera_id: str | None, data: bytes | np.ndarray, params: DetectParams, keep: Keep,
                 result: DetectResult) -> None:
        pass

    def failed(self, camera_id: str | None, exc: BaseException) -> None:
        pass


NO_TAP = NoTap()
