"""A fake instant backend for benchmarks of the host side: the real detector's answer, cached.

``bench-frontends`` measures what the service's processes spend per request besides the
model (HTTP, the hand-over between processes, decode, letterbox, NMS, JSON). The model's
forward is taken out by answering each batch shape from the first real answer for it; the
rest of the pipeline (decode, letterbox, the score filter, NMS, the reply) runs as served.
Registered by wrapping every backend of the registry (its one seam for runtimes) in the
bench's own server process; the production path never sees it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from app.inference.backends.base import BackendOptions
from app.inference.backends.registry import BACKENDS


class InstantDetector:
    """Everything of ``inner`` but ``infer``, answered from a cache per batch shape; no
    ``candidates`` (the device-side filter), so every batch goes through ``infer``."""

    def __init__(self, inner: Any) -> None:
        self._inner = inner
        self._answers: dict[tuple[int, ...], np.ndarray] = {}

    def __getattr__(self, name: str) -> Any:
        if name == "candidates":
            raise AttributeError(name)
        return getattr(self._inner, name)

    def infer(self, batch: np.ndarray) -> np.ndarray:
        """One real forward (the first image of the first batch of a shape); every other batch
        size gets that answer repeated, so no size pays a real forward mid-run."""
        n, shape = batch.shape[0], batch.shape[1:]
        answer = self._answers.get(batch.shape)
        if answer is None:
            one = self._answers.get((1, *shape))
            if one is None:
                one = self._answers[(1, *shape)] = self._inner.infer(batch[:1])
            answer = self._answers[batch.shape] = np.repeat(one, n, axis=0)
        return answer


def install_instant() -> None:
    """Wrap every registered backend (this process only)."""
    for name, factory in list(BACKENDS.items()):
        def instant(options: BackendOptions, _factory: Callable[[BackendOptions], Any] = factory) -> Any:
            return InstantDetector(_factory(options))

        BACKENDS[name] = instant
