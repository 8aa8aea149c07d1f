"""``ModelRouter``: which model a frame goes to (issue 41, docs/models.md).

A camera of the site file names its model (``model:``; default: the first model); a request
may name one (``?model=``, ``/v1/vision/custom/{model}``). The router answers both: the
camera's model, the one asked for, or the default, and refuses a request that asks for
another model than its camera's (422 ``model_mismatch`` naming both: the camera's rules are
written against its model's classes) or for a model this service does not serve (404
``unknown_model``). The camera map follows the site file (the composition root hands it
every applied config, app/wiring/models.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from app.core.errors import shorten
from app.flow.tap import NO_TAP, Tap
from app.inference.engine import InferenceEngine
from app.inference.modelset import ModelMismatch, ModelSet


@dataclass(frozen=True, slots=True)
class RolloutRoute:
    """Where a rollout (app/flow/rollout.py) sends a name's frames: in the shadow phase
    (``candidate`` None) the name's own engine answers every frame and the current side's tap
    sees it; in the canary phase the frames of ``cameras`` go to the candidate engine (its tap
    sees them), the others to the name's engine, untapped."""

    cameras: frozenset[str]
    candidate: InferenceEngine | None
    taps: Mapping[str, Tap]  # "current", "candidate"


class ModelRouter:
    """The served models and the camera -> model map of the site file in force."""

    def __init__(self, models: ModelSet, cameras: Mapping[str, str] | None = None) -> None:
        self.models = models
        self._cameras: dict[str, str] = dict(cameras or {})
        self._rollouts: dict[str, RolloutRoute] = {}

    @property
    def default(self) -> str:
        return self.models.default

    def assign(self, cameras: Mapping[str, str]) -> None:
        """The site file's cameras and their models (replaced whole: readers see one map or the other)."""
        self._cameras = dict(cameras)

    def model_of(self, camera_id: str | None) -> str:
        """The camera's model; the default for no camera or one the site file does not list."""
        return self._cameras.get(camera_id, self.models.default) if camera_id is not None else self.models.default

    def cameras_of(self, name: str) -> list[str]:
        """The site file's cameras that use ``name``, sorted."""
        return sorted(camera for camera, model in self._cameras.items() if model == name)

    def choose(self, requested: str | None, camera_id: str | None) -> str:
        """The model of a request: ``requested`` (UnknownModel, 404, if not served), which must be its
        camera's when the camera is in the site file (ModelMismatch, 422), else the camera's model."""
        if requested is None or requested == "":
            return self.model_of(camera_id)
        self.models.get(requested)  # UnknownModel
        own = self._cameras.get(camera_id) if camera_id is not None else None
        if own is not None and own != requested:
            raise ModelMismatch(f"camera {shorten(camera_id)} uses model {own!r}, not {shorten(requested)}: its rules "
                                f"are written for {own!r}'s classes (leave model out, or send ?model={own})")
        return requested

    def engine(self, name: str) -> InferenceEngine | None:
        return self.models.engine(name)

    def reroute(self, name: str, route: RolloutRoute | None) -> None:
        """A rollout's routing of ``name`` (None: none, the name's engine answers everything)."""
        if route is None:
            self._rollouts.pop(name, None)
        else:
            self._rollouts[name] = route

    def serving(self, name: str, camera_id: str | None, engine: InferenceEngine | None,
                ) -> tuple[InferenceEngine | None, Tap]:
        """The engine that answers a frame of ``name`` from ``camera_id`` (``engine``: the name's
        own) and the tap of that side: a canary camera's frames go to the candidate; ``?model=``
        alone never does (a canary is chosen by camera, docs/models.md)."""
        route = self._rollouts.get(name)
        if route is None:
            return engine, NO_TAP
        if route.candidate is None:
            return engine, route.taps["current"]
        if camera_id is not None and camera_id in route.cameras:
            return route.candidate, route.taps["candidate"]
        return engine, NO_TAP

    @contextmanager
    def lease(self, name: str, engine: InferenceEngine | None = None) -> Iterator[InferenceEngine | None]:
        """The engine of ``name`` (``engine``: the one the caller read from its slot already), held
        for one request until the block ends (app/inference/leases.py): a swap frees the old engine
        only once its last holder is done. An engine retired between the read and the lease is
        replaced by what the slot holds now (the swap put the new one there first); None while the
        model loads. A retired engine still in its slot (it cannot be, but) answers 503 itself."""
        engine = self.engine(name) if engine is None else engine
        held: InferenceEngine | None = None
        for _ in range(3):
            if engine is None or engine.leases.acquire():
                held = engine
                break
            engine = self.engine(name)
        try:
            yield engine
        finally:
            if held is not None:
                held.leases.release()
