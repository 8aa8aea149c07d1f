"""``campusguard_shadow_*``: the lane's figures, read from its book at scrape time.

The overall series is ``camera_id="_all"`` in the same families as the cameras' (no camera id
starts with ``_``), present from the first scrape even with the shadow off (agreement NaN,
0 frames), so dashboards and the alert rule always find their series. Camera labels were
capped by the lane (``_other`` beyond CAMPUSGUARD_METRICS_MAX_CAMERAS).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from app.inference.shadow.book import OVERALL, AgreementBook

NS = "campusguard_shadow"


class ShadowCollector(Collector):
    def __init__(self, book: Callable[[], AgreementBook]) -> None:
        self.book = book  # the running lane's (a lane built after the model loads replaces the null one)

    def collect(self) -> Iterator:
        book = self.book()
        agreement = GaugeMetricFamily(f"{NS}_agreement", "F1 of the primary's boxes against the reference's over the "
                                      "rolling window (class-aware IoU >= 0.5, as campusguard parity); NaN: no frame",
                                      labels=["camera_id"])
        frames = GaugeMetricFamily(f"{NS}_window_frames", "Frames compared within the rolling window",
                                   labels=["camera_id"])
        recall = GaugeMetricFamily(f"{NS}_recall", "Reference boxes the primary found, over the window",
                                   labels=["camera_id"])
        precision = GaugeMetricFamily(f"{NS}_precision", "Primary boxes that match a reference box, over the window",
                                      labels=["camera_id"])
        drift = GaugeMetricFamily(f"{NS}_confidence_drift", "Mean primary minus reference confidence of matched "
                                  "boxes over the window", labels=["camera_id"])
        for camera in [OVERALL, *book.cameras()]:
            s = book.summary(None if camera == OVERALL else camera)
            agreement.add_metric([camera], s.agreement)
            frames.add_metric([camera], s.frames)
            recall.add_metric([camera], s.recall)
            precision.add_metric([camera], s.precision)
            drift.add_metric([camera], s.confidence_drift)
        yield from (agreement, frames, recall, precision, drift)
        yield GaugeMetricFamily(f"{NS}_alert_below", "Agreement below which CampusGuardShadowDisagreement fires for "
                                "this replica (CAMPUSGUARD_SHADOW_ALERT_BELOW, default by served precision)",
                                value=book.alert_below)
        compared, sampled, dropped = book.counters()
        total = CounterMetricFamily(f"{NS}_compared", "Frames run on the reference and compared, by camera "
                                    "(_all: every frame, with or without a camera)", labels=["camera_id"])
        total.add_metric([OVERALL], sum(compared.values()))
        for camera, n in sorted(compared.items()):
            if camera:
                total.add_metric([camera], n)
        yield total
        yield CounterMetricFamily(f"{NS}_sampled", "Frames sampled for the reference (compared or dropped)",
                                  value=sampled)
        dropped_family = CounterMetricFamily(f"{NS}_dropped", "Sampled frames not compared: busy (queue full), "
                                             "stale (the engine was never idle in time), failed (reference error)",
                                             labels=["reason"])
        for reason, n in dropped.items():
            dropped_family.add_metric([reason], n)
        yield dropped_family
