"""``campusguard_source_*``: each camera stream's state and counters, read from the SourceBook at
scrape time (so the embedded ingest and a gateway's reports export the same series).

Labels stay bounded: ``camera_id`` goes through the metrics' camera cap (``_other`` beyond
it: its samples are sums, and its state series count cameras), ``state`` is one of
``STATES`` and a drop ``reason`` one of the known reasons (``http_<status>`` included), else
``other``. A counter from a gateway starts over when that gateway restarts, which
Prometheus' ``rate``/``increase`` handle as a counter reset.
"""

from __future__ import annotations

import datetime as dt
import math
import re
from collections import defaultdict
from collections.abc import Callable, Iterator

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from app.core.sources import STATES, SourceBook

NS = "campusguard_source"
DROP_REASONS = frozenset({
    "connect_burst", "burst", "superseded", "service_busy", "service_unreachable", "service_error", "key_refused",
    "sink_error", "stopping", "not_ready", "queue_full", "engine_busy", "engine_timeout", "shutting_down",
    "out_of_memory", "inference_timeout", "invalid_timestamp", "deadline_exceeded"})
_HTTP = re.compile(r"http_[1-5]\d\d")


def reason_label(reason: str) -> str:
    return reason if reason in DROP_REASONS or _HTTP.fullmatch(reason) else "other"


def _age_s(last_frame_at: str | None, now: dt.datetime) -> float:
    if not last_frame_at:
        return math.nan
    try:
        return max(0.0, (now - dt.datetime.fromisoformat(last_frame_at)).total_seconds())
    except (TypeError, ValueError):
        return math.nan


class SourceCollector(Collector):
    """Registered on the app's registry by the composition root."""

    def __init__(self, book: SourceBook, camera_label: Callable[[str], str]) -> None:
        self.book, self.camera_label = book, camera_label

    def collect(self) -> Iterator[Metric]:
        state = GaugeMetricFamily(f"{NS}_state", "1 for the state each camera stream is in (cameras under _other: "
                                  "how many are in it)", labels=["camera_id", "state"])
        fps = GaugeMetricFamily(f"{NS}_input_fps", "Frames per second read from the stream (last 10 s)",
                                labels=["camera_id"])
        age = GaugeMetricFamily(f"{NS}_last_frame_age_seconds", "Seconds since the last frame was read from the "
                                "stream (NaN: none yet)", labels=["camera_id"])
        counters = {name: CounterMetricFamily(f"{NS}_{name}", text, labels=["camera_id"]) for name, text in (
            ("reconnects", "Reader restarts after a failure or a stall"),
            ("frames_read", "Frames read from the stream (after sampling)"),
            ("frames_sent", "Frames that reached detection"))}
        dropped = CounterMetricFamily(f"{NS}_frames_dropped", "Frames read but not sent, by reason",
                                      labels=["camera_id", "reason"])
        totals: dict[tuple[str, str], float] = defaultdict(float)  # (family, camera) -> value
        states: dict[tuple[str, str], int] = defaultdict(int)
        drops: dict[tuple[str, str], float] = defaultdict(float)
        ages: dict[str, float] = {}
        now = dt.datetime.now(dt.timezone.utc)
        for camera_id, source in sorted(self.book.all().items()):
            camera = self.camera_label(camera_id)
            reported = source.get("state")
            shown = reported if isinstance(reported, str) and reported in STATES else "unknown"
            states[(camera, shown)] += 1
            totals[("input_fps", camera)] += float(source.get("input_fps") or 0.0)
            for name in counters:
                totals[(name, camera)] += float(source.get(name) or 0)
            for reason, n in (source.get("dropped") or {}).items():
                drops[(camera, reason_label(str(reason)))] += float(n)
            seconds = _age_s(source.get("last_frame_at"), now)
            ages[camera] = seconds if math.isnan(ages.get(camera, math.nan)) else min(ages[camera], seconds)
        for camera in sorted({c for c, _ in states}):
            for name in STATES:  # every state of a camera, 0 or 1: alerts compare without absent series
                state.add_metric([camera, name], states.get((camera, name), 0))
            fps.add_metric([camera], totals[("input_fps", camera)])
            age.add_metric([camera], ages.get(camera, math.nan))
            for name, family in counters.items():
                family.add_metric([camera], totals[(name, camera)])
        for (camera, reason), n in sorted(drops.items()):
            dropped.add_metric([camera, reason], n)
        yield from (state, fps, age, *counters.values(), dropped)
