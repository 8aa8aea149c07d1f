"""The rollout families (``campusguard_rollout_*``), labelled by model name (bounded: the served
models, at most 32 in a models file plus runtime loads).

Registered on the app's registry by ``Metrics.part`` (``RolloutSeries.of(metrics)``); a
model's series are declared when the controller is built (every model served then) or when its
first rollout starts: the counters at 0 for every phase and outcome, so
``increase(campusguard_rollout_total{outcome="rolled_back"}[...])`` (the alert
CampusGuardRolloutRolledBack) sees the step from 0 to 1; the phase at 0 for every phase (no
rollout yet) and the agreement and its floor at NaN (nothing compared), so the dashboard's
rollout row (deploy/grafana) queries series that exist from the first scrape.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from app.core.metrics import NAMESPACE, Metrics
from app.flow.rollout_state import OUTCOMES, PHASES


class RolloutSeries:
    @classmethod
    def of(cls, metrics: Metrics) -> RolloutSeries:
        return metrics.part(cls)

    def __init__(self, metrics: Metrics) -> None:
        r, ns = metrics.registry, NAMESPACE
        self.phase = Gauge("rollout_phase", "1 for the phase the model's latest rollout is in (shadow, canary, "
                           "promoted, rolled_back), 0 for the others", ["model", "phase"], namespace=ns, registry=r)
        self.agreement = Gauge("rollout_agreement", "F1 of the candidate's boxes against the current model's over "
                               "the rollout phase's window (NaN: none compared, or other classes)", ["model"],
                               namespace=ns, registry=r)
        self.compared = Counter("rollout_compared", "Frames run by both the candidate and the current model, by "
                                "phase", ["model", "phase"], namespace=ns, registry=r)
        self.total = Counter("rollout", "Rollouts ended, by outcome: promoted, rolled_back (automatically), "
                             "aborted (by hand)", ["model", "outcome"], namespace=ns, registry=r)
        self.floor = Gauge("rollout_agreement_floor", "The agreement floor of the model's latest rollout: below it "
                           "the candidate is rolled back (NaN: no rollout since the start)", ["model"],
                           namespace=ns, registry=r)
        self._declared: set[str] = set()

    def declare(self, model: str) -> None:
        """The series of ``model`` (every served model at startup: the alert's and the dashboard's
        series exist); a model declared already keeps its values."""
        if model in self._declared:
            return
        self._declared.add(model)
        for phase in PHASES[:2]:
            self.compared.labels(model, phase)
        for outcome in OUTCOMES:
            self.total.labels(model, outcome)
        for phase in PHASES:
            self.phase.labels(model, phase).set(0)
        self.agreement.labels(model).set(float("nan"))
        self.floor.labels(model).set(float("nan"))

    def started(self, model: str, floor: float) -> None:
        self.declare(model)
        self.agreement.labels(model).set(float("nan"))
        self.floor.labels(model).set(floor)
        self.in_phase(model, "shadow")

    def in_phase(self, model: str, phase: str) -> None:
        for name in PHASES:
            self.phase.labels(model, name).set(1 if name == phase else 0)

    def ended(self, model: str, phase: str, outcome: str) -> None:
        self.in_phase(model, phase)
        self.total.labels(model, outcome).inc()
