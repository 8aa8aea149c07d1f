"""``campusguard_shadow_*``: the lane's figures, read from its book at scrape time.

The overall series is ``camera_id="_all"`` in the same families as the cameras' (no camera id
starts with ``_``), present from the first scrape even with the shadow off (agreement NaN,
0 frames), so dashboards and the alert rule always find their series. Camera labels were
capped by the lane (``_other`` beyond CAMPUSGUARD_METRICS_MAX_CAMERAS). Every family carries the
``model`` label of the model the reference shadows: the default model (the reference is built
from its weights, or CAMPUSGUARD_SHADOW_WEIGHTS), so per-model dashboards and alerts join it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from app.inference.shadow.book import OVERALL, AgreementBook

NS = "campusguard_shadow"


class ShadowCollector(Collector):
    def __init__(self, book: Callable[[], AgreementBook], model: str) -> None:
        self.book = book  # the running lane's (a lane built after the model loads replaces the null one)
        self.model = model  # the ``model`` label: the model the reference shadows

    def collect(self) -> Iterator:
        book, m = self.book(), self.model
        agreement = GaugeMetricFamily(f"{NS}_agreement", "F1 of the primary's boxes against the reference's over the "
                                      "rolling window (class-aware IoU >= 0.5, as campusguard parity); NaN: no frame",
                                      labels=["model", "camera_id"])
        frames = GaugeMetricFamily(f"{NS}_window_frames", "Frames compared within the rolling window",
                                   labels=["model", "camera_id"])
        recall = GaugeMetricFamily(f"{NS}_recall", "Reference boxes the primary found, over the window",
                                   labels=["model", "camera_id"])
        precision = GaugeMetricFamily(f"{NS}_precision", "Primary boxes that match a reference box, over the window",
                                      labels=["model", "camera_id"])
        drift = GaugeMetricFamily(f"{NS}_confidence_drift", "Mean primary minus reference confidence of matched "
                                  "boxes over the window", labels=["model", "camera_id"])
        for camera in [OVERALL, *book.cameras()]:
            s = book.summary(None if camera == OVERALL else camera)
            agreement.add_metric([m, camera], s.agreement)
            frames.add_metric([m, camera], s.frames)
            recall.add_metric([m, camera], s.recall)
            precision.add_metric([m, camera], s.precision)
            drift.add_metric([m, camera], s.confidence_drift)
        yield from (agreement, frames, recall, precision, drift)
        floor = GaugeMetricFamily(f"{NS}_alert_below", "Agreement below which CampusGuardShadowDisagreement fires "
                                  "for this replica (CAMPUSGUARD_SHADOW_ALERT_BELOW, default by served precision)",
                                  labels=["model"])
        floor.add_metric([m], book.alert_below)
        yield floor
        compared, sampled, dropped = book.counters()
        total = CounterMetricFamily(f"{NS}_compared", "Frames run on the reference and compared, by camera "
                                    "(_all: every frame, with or without a camera)", labels=["model", "camera_id"])
        total.add_metric([m, OVERALL], sum(compared.values()))
        for camera, n in sorted(compared.items()):
            if camera:
                total.add_metric([m, camera], n)
        yield total
        sampled_family = CounterMetricFamily(f"{NS}_sampled", "Frames sampled for the reference (compared or "
                                             "dropped)", labels=["model"])
        sampled_family.add_metric([m], sampled)
        yield sampled_family
        dropped_family = CounterMetricFamily(f"{NS}_dropped", "Sampled frames not compared: busy (queue full), "
                                             "stale (the engine was never idle in time), failed (reference error)",
                                             labels=["model", "reason"])
        for reason, n in dropped.items():
            dropped_family.add_metric([m, reason], n)
        yield dropped_family
