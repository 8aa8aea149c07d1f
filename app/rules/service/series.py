"""The rules' Prometheus series: declared at 0 from the start, updated per frame and event.

Every configured camera/zone/rule counter exists from the start (and after each reload),
so ``rate()`` and alerts work before the first event and dashboards are never empty.

``zone_objects`` (a gauge: what is in a zone now) is exported only by the replica that owns
the camera, i.e. receives its frames: from its first frame here until it goes offline,
moves to another replica (the hand-over, health.py), is reset or leaves the site file. So a
``sum`` over replicas is the fleet's value, and a replica never keeps exporting the last
count of a camera that left it (docs/rules.md, Metrics).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from app.core.metrics import Metrics
from app.rules.logic.evaluator import CameraState
from app.rules.site.schema import SiteConfig
from app.rules.site.viewchecks import KINDS


class RulesSeries:
    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def declare(self, config: SiteConfig, cameras: list[CameraState], age_of: Callable[[str], float],
                file_changed: Callable[[], float]) -> None:
        m = self.metrics
        m.site_file_changed.set_function(file_changed)
        for outcome in ("delivered", "http_error", "network_error"):
            m.webhook_deliveries.labels(outcome)
        for outcome in ("delivered", "broker_error", "not_connected"):  # at 0 with MQTT off too, like webhooks
            m.mqtt_deliveries.labels(outcome)
        for cam in cameras:
            label = m.camera_label(cam.camera.id)
            for reason in ("future", "past"):
                m.invalid_timestamps.labels(label, reason)
            for kind in KINDS:  # started view problems from 0 (the gauges: app/rules/service/views.py)
                m.camera_view_problems.labels(label, kind)
            m.camera_frame_age.labels(label).set_function(lambda cid=cam.id: age_of(cid))
            m.camera_offline_after.labels(label).set(config.offline_after(cam.camera))
            for zone in cam.zones:
                if cam.last_t is not None:  # a camera this replica evaluates (owns): see the module docstring
                    m.zone_objects.labels(label, zone.name).set(cam.zone_counts.get(zone.name, 0))
                for rule in zone.rules:
                    m.events.labels(label, zone.name, rule.name)
                    if rule.type == "line_crossing":  # counted directions start at 0 (rate() and dashboards)
                        direction = rule.config.direction
                        for way in (("in", "out") if direction == "both" else (direction,)):
                            for cls in sorted(rule.classes):
                                m.line_crossings.labels(label, f"{zone.name}/{rule.name}", way, cls)

    def invalid_timestamp(self, camera_id: str, reason: str) -> None:
        self.metrics.invalid_timestamps.labels(self.metrics.camera_label(camera_id), reason).inc()

    def frame(self, camera_id: str, counts: dict[str, int], seconds: float) -> None:
        label = self.metrics.camera_label(camera_id)
        for zone, n in counts.items():
            self.metrics.zone_objects.labels(label, zone).set(n)
        self.metrics.rule_latency.observe(seconds)

    def event_started(self, camera_id: str, zone: str, rule: str) -> None:
        self.metrics.events.labels(self.metrics.camera_label(camera_id), zone, rule).inc()

    def crossing(self, camera_id: str, line: str, direction: str, class_name: str) -> None:
        self.metrics.line_crossings.labels(self.metrics.camera_label(camera_id), line, direction, class_name).inc()

    def view_problems(self, camera_id: str, open_kinds: Iterable[str]) -> None:
        """The camera's ``camera_view_problem`` gauges: 1 for each open kind, 0 for the others."""
        label, on = self.metrics.camera_label(camera_id), set(open_kinds)
        for kind in KINDS:
            self.metrics.camera_view_problem.labels(label, kind).set(1 if kind in on else 0)

    def view_started(self, camera_id: str, kind: str) -> None:
        self.metrics.camera_view_problems.labels(self.metrics.camera_label(camera_id), kind).inc()

    def view_check(self, seconds: float) -> None:
        self.metrics.view_check_seconds.observe(seconds)

    def retire_view(self, camera_id: str) -> None:
        """A camera no longer in the site file: its view gauges go (its counters stay)."""
        for kind in KINDS:
            try:
                self.metrics.camera_view_problem.remove(self.metrics.camera_label(camera_id), kind)
            except KeyError:
                pass

    def site_reload(self, trigger: str, outcome: str) -> None:
        self.metrics.site_reloads.labels(trigger, outcome).inc()

    def retire(self, cam: CameraState) -> None:
        """Drop the zone gauges of a camera state no longer in use (reset, reload, offline, moved away)."""
        for zone in cam.zones:
            try:
                self.metrics.zone_objects.remove(self.metrics.camera_label(cam.id), zone.name)
            except KeyError:
                pass
