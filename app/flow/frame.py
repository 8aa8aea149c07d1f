"""``FrameFlow``: one frame's way through detection, the shadow lane, the rules and the metrics.

Two phases, because one check must run before the body is read:

1. ``admit(camera_id, timestamp)``: the capture time under the camera's policy (422
   ``invalid_timestamp`` from ``FrameRules.accept_capture_time``), before the upload is parsed
   or decoded, so a bad timestamp never reaches inference. The other early checks stay with
   their callers: the engine's capacity in ``app/api/deps.py`` (``ready_engine``) and the
   DeepStack header key in its route.
2. ``run`` (one frame) or ``run_batch`` (several, one camera): the engine detects; once it has
   answered, the frame is offered to the shadow lane (sampled, never blocks), the camera's rules
   evaluate it on the engine's executor, and its detections are counted per camera.

What differs between callers is a parameter, never a copy of a step:

- ``keep``: what of the decoded frame comes back (``Admitted.keep``: ``full`` for a frame
  the caller draws on, ``evidence`` for the rules, ``none`` otherwise). The routes send
  encoded bytes; the embedded ingest sends the reader's RGB array, which is itself the
  kept image.
- the shadow lane gets exactly what the engine got: bytes from the routes, the RGB array
  from the ingest (its reference decodes or letterboxes it itself).
- ``NO_CAMERA``: DeepStack frames name no camera, so they pass no capture-time check and
  feed no rules.
- ``run_batch`` detects every image at once, then hands the successes to the rules one by
  one in upload order; when every image failed with a 503 the service, not the images,
  failed: that error is raised for the client to retry.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from app.core.errors import ServiceError
from app.core.metrics import Metrics
from app.core.types import Detection
from app.flow.models import ModelRouter
from app.flow.tap import NO_TAP, Tap
from app.inference.engine import DetectResult, InferenceEngine
from app.inference.pipeline import DetectParams, Keep
from app.inference.shadow.lane import NoShadow
from app.rules.port import FrameRules

Image = bytes | np.ndarray  # an encoded upload (routes) or a decoded RGB frame (embedded ingest)


class Shadow(Protocol):
    """The shadow lane as the flow sees it (``ShadowLane``, or ``NoShadow`` while off)."""

    def offer(self, camera_id: str | None, data: bytes | np.ndarray, params: DetectParams,
              detections: Sequence[Detection]) -> bool: ...


@dataclass(frozen=True, slots=True)
class Admitted:
    """Phase one's verdict: the camera, its capture time under the policy (None: server time,
    or no camera), and whether the camera's rules see the frame."""

    camera_id: str | None
    when: dt.datetime | None
    rules_on: bool

    def keep(self, draw: bool = False) -> Keep:
        """What of the decoded frame the caller needs back: the whole frame to draw on
        (``draw``), an evidence-sized one for the rules, or nothing."""
        return "full" if draw else "evidence" if self.rules_on else "none"


NO_CAMERA = Admitted(None, None, False)  # a frame without a camera: no capture-time check, no rules


@dataclass(frozen=True, slots=True)
class Outcome:
    """One frame's answer: the engine's result (``result.image`` is the kept frame) and the
    rule events it started or ended."""

    result: DetectResult
    events: list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class FrameFlow:
    """The per-frame use case over one model's ready engine, the rules, the shadow lane (the
    default model's only: its reference is that model's) and the metrics."""

    engine: InferenceEngine
    rules: FrameRules
    shadow: Shadow
    metrics: Metrics
    model: str = ""  # the served model's name (ModelRouter); the engine is that model's
    tap: Tap = NO_TAP  # a rollout of the model (app/flow/rollout.py) sees what this engine answers

    # --- phase 1: before the body is read ----------------------------------------------------
    def admit(self, camera_id: str | None, timestamp: dt.datetime | None) -> Admitted:
        """The capture-time check (InvalidTimestamp, 422) of a frame from ``camera_id``;
        without a camera there is nothing to check and no rules run (``NO_CAMERA``)."""
        if camera_id is None:
            return NO_CAMERA
        when = self.rules.accept_capture_time(camera_id, timestamp)
        return Admitted(camera_id, when, self.rules.enabled)

    # --- phase 2: the frame -------------------------------------------------------------------
    async def run(self, frame: Admitted, image: Image, params: DetectParams, keep: Keep) -> Outcome:
        """Detect, then offer, evaluate and count (the engine's ServiceErrors propagate:
        QueueFull, NotReady, InvalidImage...)."""
        try:
            result = await self.engine.detect(image, params, keep_image=keep)
        except BaseException as exc:
            self.tap.failed(frame.camera_id, exc)
            raise
        return await self._answered(frame, image, params, result, keep)

    async def run_batch(self, frame: Admitted, images: Sequence[Image], params: DetectParams,
                        keep: Keep) -> list[Outcome | BaseException]:
        """Every image detected at once; per image its Outcome or what it failed with, in
        upload order (the rules see the successes in that order)."""
        results = await asyncio.gather(*(self.engine.detect(image, params, keep_image=keep)
                                         for image in images), return_exceptions=True)
        unavailable = [r for r in results if isinstance(r, ServiceError) and r.status == 503]
        if results and len(unavailable) == len(results):
            raise unavailable[0]  # the service, not the images, failed: let the client retry
        outcomes: list[Outcome | BaseException] = []
        for image, result in zip(images, results, strict=True):
            if isinstance(result, BaseException):
                self.tap.failed(frame.camera_id, result)
            outcomes.append(result if isinstance(result, BaseException)
                            else await self._answered(frame, image, params, result, keep))
        return outcomes

    async def _answered(self, frame: Admitted, image: Image, params: DetectParams, result: DetectResult,
                        keep: Keep) -> Outcome:
        self.shadow.offer(frame.camera_id, image, params, result.detections)  # after the answer; never blocks
        self.tap.answered(frame.camera_id, image, params, keep, result)  # a rollout's comparison; never blocks
        events = await self._evaluate(frame, result)
        self.metrics.count_detections([d.class_name for d in result.detections], frame.camera_id)
        return Outcome(result, events)

    async def _evaluate(self, frame: Admitted, result: DetectResult) -> list[dict[str, Any]]:
        """The camera's rules on the engine's executor (they may draw and encode evidence)."""
        if not frame.rules_on or frame.camera_id is None:
            return []
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.engine.executor, self.rules.evaluate, frame.camera_id, frame.when,
                                          (result.width, result.height), result.detections, result.image)


class LiveFlow:
    """A ``FrameFlow`` over parts that arrive after startup (each model's engine once it is
    loaded, the shadow lane once its reference is), for callers outside a request: the embedded
    ingest asks for the flow of a camera per frame (``held``: its engine leased for that frame),
    and gets its model's engine (the site file's ``model:``), or None while that model is loading."""

    def __init__(self, models: ModelRouter, rules: FrameRules, shadow: Callable[[], Shadow],
                 metrics: Metrics) -> None:
        self.models, self.rules, self.shadow, self.metrics = models, rules, shadow, metrics

    def __call__(self, camera_id: str | None = None) -> FrameFlow | None:
        name = self.models.model_of(camera_id)
        engine, tap = self.models.serving(name, camera_id, self.models.engine(name))
        return None if engine is None else self._flow(name, engine, tap)

    @contextmanager
    def held(self, camera_id: str | None = None) -> Iterator[FrameFlow | None]:
        """The camera's flow with its engine (a canary camera's: the rollout's candidate) leased
        until the block ends, so a swap frees that engine only once this frame is answered
        (``ModelRouter.lease``); None while it loads."""
        name = self.models.model_of(camera_id)
        engine, tap = self.models.serving(name, camera_id, self.models.engine(name))
        with self.models.lease(name, engine) as held:
            yield None if held is None else self._flow(name, held, tap)

    def _flow(self, name: str, engine: InferenceEngine, tap: Tap) -> FrameFlow:
        shadow = self.shadow() if name == self.models.default else NoShadow()
        return FrameFlow(engine, self.rules, shadow, self.metrics, name, tap)
