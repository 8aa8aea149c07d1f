"""Rollouts behind the shadow reference (app/flow/rollout.py): the controller over the model
switch, with what needs the settings and the app's parts.

- the comparator's rate (CAMPUSGUARD_ROLLOUT_MAX_FPS);
- the default agreement floor: the shadow alert floor of the served precision
  (CAMPUSGUARD_SHADOW_ALERT_BELOW, else 0.95 / 0.85 for int8: app/inference/shadow/book.py);
- the system's audit records (actor ``system:rollout``) into the app's audit trail;
- the mAP check of a candidate with other classes on CAMPUSGUARD_GATE_DATASET: both models'
  engines (their own queues, as served) over the labelled set, scored on the classes both
  models and the set share; the candidate needs the current's mAP50-95 minus 0.01, or
  ``map_floor``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

from app.api.state import AppState
from app.config import Settings
from app.core.audit import AuditEntry
from app.core.metrics import Metrics
from app.flow.modelswap import Candidate
from app.flow.rollout import MapGate, RolloutController, candidate_lane, no_map_gate
from app.flow.rollout_state import CandidateMapTooLow
from app.inference.engine import InferenceEngine
from app.inference.modelset import ServedModel
from app.inference.pipeline import DetectParams, Pipeline
from app.inference.shadow.book import alert_floor
from app.inference.shadow.candidate import CandidateOptions

MAP_MARGIN = 0.01  # the candidate may score this much below the current model on the shared classes


class EngineRunner:
    """An engine as ``accuracy.evaluate`` calls a pipeline: through the engine's own queue, so
    checking a serving model never runs its detector on a second thread."""

    def __init__(self, engine: InferenceEngine) -> None:
        self.engine, self.detector = engine, engine.pipeline.detector

    def detect(self, blobs: Sequence[bytes], params: DetectParams, batch_size: int = 1,
               shape: tuple[int, int] | None = None) -> list:
        async def run() -> list:
            results = await asyncio.gather(*(self.engine.detect(blob, params) for blob in blobs))
            return [result.detections for result in results]

        return asyncio.run(run())


def labelled_map_gate(dataset_root: Path) -> MapGate:
    def gate(name: str, current: ServedModel, candidate: Candidate, floor: float | None) -> dict[str, Any]:
        from app.inference.accuracy import evaluate, load_dataset

        dataset = load_dataset(dataset_root)
        engine = current.engine
        known = current.class_names() or {}
        by_name = {label: index for index, label in dataset.names.items()}
        shared = sorted(set(known.values()) & set(candidate.classes.values()) & set(by_name))
        if engine is None or not shared:
            raise CandidateMapTooLow(f"the candidate shares no class with model {name!r} and the labelled set "
                                     f"{dataset_root}: it cannot be judged", code="candidate_map_too_low")
        scores = []
        for model_engine, classes in ((engine, known), (candidate.engine, candidate.classes)):
            mapping = {index: by_name[label] for index, label in classes.items() if label in shared}
            runner = cast(Pipeline, EngineRunner(model_engine))  # evaluate needs detect() and detector only
            scores.append(evaluate(runner, dataset, progress=False, class_map=mapping).map50_95)
        needed = floor if floor is not None else scores[0] - MAP_MARGIN
        figures = {"shared_classes": len(shared), "images": len(dataset.images), "current_map": round(scores[0], 4),
                   "candidate_map": round(scores[1], 4), "floor": round(needed, 4)}
        if scores[1] < needed:
            raise CandidateMapTooLow(f"the candidate's mAP50-95 on the {len(shared)} classes it shares with model "
                                     f"{name!r} is {scores[1]:.4f}, below {needed:.4f} (current {scores[0]:.4f}"
                                     f"{' - 0.01' if floor is None else '; map_floor'}; {len(dataset.images)} "
                                     f"images of {dataset_root})")
        return figures

    return gate


def install_rollouts(state: AppState, settings: Settings, metrics: Metrics) -> None:
    """``state.rollouts``: the rollout routes' controller over ``state.switch``'s loader."""
    options = CandidateOptions(max_fps=settings.rollout_max_fps)

    def record(action: str, model: str, before: str | None, after: str | None) -> None:
        state.gate.audit.get().record(AuditEntry(actor="system:rollout", action=action, target=model,
                                                 before=before, after=after))

    state.rollouts.put(RolloutController(
        state.models, state.switch.get(), metrics,
        lanes=lambda candidate, current, book, comparable, counted: candidate_lane(
            candidate, current, book, comparable, counted, options),
        map_gate=labelled_map_gate(settings.gate_dataset) if settings.gate_dataset is not None else no_map_gate,
        floor=lambda precision: alert_floor(precision, settings.shadow_alert_below),
        record=record))
