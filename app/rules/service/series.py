"""The rules' Prometheus families and series: declared at 0 from the start, updated per frame and event.

The families (``RulesFamilies``) are registered on the app's registry the first time a rules
service asks for them (``Metrics.part``), so a server without rules never exports them; the
store's and the deliveries' own families are in ``app/rules/store/series.py`` and
``app/rules/delivery/series.py``.

Every configured camera/zone/rule counter exists from the start (and after each reload),
so ``rate()`` and alerts work before the first event and dashboards are never empty.

``zone_objects`` (a gauge: what is in a zone now) is exported only by the replica that owns
the camera, i.e. receives its frames: from its first frame here until it goes offline,
moves to another replica (the hand-over, health.py), is reset or leaves the site file. So a
``sum`` over replicas is the fleet's value, and a replica never keeps exporting the last
count of a camera that left it (docs/rules.md, Metrics).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable

from prometheus_client import Counter, Gauge, Histogram

from app.core.metrics import LATENCY_BUCKETS, NAMESPACE, Metrics
from app.rules.logic.evaluator import CameraState
from app.rules.site.schema import LineCrossingRule, SiteConfig
from app.rules.site.viewchecks import KINDS

VIEW_CHECK_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1)  # budget: 2 ms per check


class RulesFamilies:
    """The families the rules service counts into, registered once per registry."""

    def __init__(self, metrics: Metrics) -> None:
        r, ns = metrics.registry, NAMESPACE
        self.events = Counter("events", "Rule events started", ["camera_id", "zone", "rule"], namespace=ns, registry=r)
        self.line_crossings = Counter("line_crossings", "Objects crossing a counting line (line_crossing rules), "
                                      "by camera (capped), line (zone/rule), direction and class",
                                      ["camera_id", "line", "direction", "class_name"], namespace=ns, registry=r)
        self.site_reloads = Counter("site_reloads", "Site file reloads by trigger (request, signal, zone_edit, "
                                    "file_changed) and outcome (ok, refused: the running config stayed)",
                                    ["trigger", "outcome"], namespace=ns, registry=r)
        self.site_file_changed = Gauge("site_file_changed", "1 while the site file on disk is not the running "
                                       "config: a change refused as invalid, or one not loaded yet",
                                       namespace=ns, registry=r)
        self.zone_objects = Gauge("zone_objects", "Objects currently inside each zone", ["camera_id", "zone"],
                                  namespace=ns, registry=r)
        self.rule_latency = Histogram("rule_evaluation_seconds", "Rule evaluation time per frame",
                                      namespace=ns, registry=r, buckets=LATENCY_BUCKETS)
        self.camera_view_problem = Gauge("camera_view_problem", "1 while the camera's view has this problem "
                                         "(kind: blinded, covered, moved, defocused, frozen); declared at 0 for every "
                                         "configured camera", ["camera_id", "kind"], namespace=ns, registry=r)
        self.camera_view_problems = Counter("camera_view_problems", "View problems started (camera_view events), by "
                                            "camera and kind", ["camera_id", "kind"], namespace=ns, registry=r)
        self.view_check_seconds = Histogram("view_check_seconds", "Time of one camera view check (frames between "
                                            "checks cost nothing and are not observed)",
                                            namespace=ns, registry=r, buckets=VIEW_CHECK_BUCKETS)
        self.invalid_timestamps = Counter("invalid_timestamps", "Frames refused for their capture time, by camera "
                                          "and reason (future: clock ahead; past: too old)",
                                          ["camera_id", "reason"], namespace=ns, registry=r)
        self.camera_frame_age = Gauge("camera_last_frame_age_seconds",
                                      "Seconds since the camera's last frame reached this replica (NaN: never)",
                                      ["camera_id"], namespace=ns, registry=r)
        self.camera_offline_after = Gauge("camera_offline_after_seconds", "The camera's offline_after_s",
                                          ["camera_id"], namespace=ns, registry=r)
        self.rules_worker_restarts = Counter("rules_worker_restarts", "Rules shard workers restarted, by reason "
                                             "(ended: the process died; hung: no answer within "
                                             "CAMPUSGUARD_RULES_WORKER_TIMEOUT_S, killed)", ["reason"],
                                             namespace=ns, registry=r)


class RulesSeries:
    """What the rules service reports, in its own words (the families: ``RulesFamilies``)."""

    def __init__(self, metrics: Metrics) -> None:
        self.label = metrics.camera_label  # the app's cap on camera labels
        self.families = metrics.part(RulesFamilies)

    def watch_site(self, file_changed: Callable[[], float]) -> None:
        """The site-file-changed gauge reads ``file_changed`` (the site manager's) at each scrape."""
        self.families.site_file_changed.set_function(file_changed)

    def declare(self, config: SiteConfig, cameras: list[CameraState], age_of: Callable[[str], float]) -> None:
        m = self.families
        for cam in cameras:
            label = self.label(cam.camera.id)
            for reason in ("future", "past"):
                m.invalid_timestamps.labels(label, reason)
            for kind in KINDS:  # started view problems from 0 (the gauges: app/rules/service/views.py)
                m.camera_view_problems.labels(label, kind)
            m.camera_frame_age.labels(label).set_function(functools.partial(age_of, cam.id))
            m.camera_offline_after.labels(label).set(config.offline_after(cam.camera))
            for zone in cam.zones:
                if cam.last_t is not None:  # a camera this replica evaluates (owns): see the module docstring
                    m.zone_objects.labels(label, zone.name).set(cam.zone_counts.get(zone.name, 0))
                for rule in zone.rules:
                    m.events.labels(label, zone.name, rule.name)
                    if isinstance(rule.config, LineCrossingRule):  # counted directions start at 0 (rate(), dashboards)
                        direction = rule.config.direction
                        for way in (("in", "out") if direction == "both" else (direction,)):
                            for cls in sorted(rule.classes):
                                m.line_crossings.labels(label, f"{zone.name}/{rule.name}", way, cls)

    def invalid_timestamp(self, camera_id: str, reason: str) -> None:
        self.families.invalid_timestamps.labels(self.label(camera_id), reason).inc()

    def frame(self, camera_id: str, counts: dict[str, int], seconds: float) -> None:
        label = self.label(camera_id)
        for zone, n in counts.items():
            self.families.zone_objects.labels(label, zone).set(n)
        self.families.rule_latency.observe(seconds)

    def event_started(self, camera_id: str, zone: str, rule: str) -> None:
        self.families.events.labels(self.label(camera_id), zone, rule).inc()

    def crossing(self, camera_id: str, line: str, direction: str, class_name: str) -> None:
        self.families.line_crossings.labels(self.label(camera_id), line, direction, class_name).inc()

    def view_problems(self, camera_id: str, open_kinds: Iterable[str]) -> None:
        """The camera's ``camera_view_problem`` gauges: 1 for each open kind, 0 for the others."""
        label, on = self.label(camera_id), set(open_kinds)
        for kind in KINDS:
            self.families.camera_view_problem.labels(label, kind).set(1 if kind in on else 0)

    def view_started(self, camera_id: str, kind: str) -> None:
        self.families.camera_view_problems.labels(self.label(camera_id), kind).inc()

    def view_check(self, seconds: float) -> None:
        self.families.view_check_seconds.observe(seconds)

    def retire_view(self, camera_id: str) -> None:
        """A camera no longer in the site file: its view gauges go (its counters stay)."""
        for kind in KINDS:
            try:
                self.families.camera_view_problem.remove(self.label(camera_id), kind)
            except KeyError:
                pass

    def site_reload(self, trigger: str, outcome: str) -> None:
        self.families.site_reloads.labels(trigger, outcome).inc()

    def retire(self, cam: CameraState) -> None:
        """Drop the zone gauges of a camera state no longer in use (reset, reload, offline, moved away)."""
        for zone in cam.zones:
            try:
                self.families.zone_objects.remove(self.label(cam.id), zone.name)
            except KeyError:
                pass

    def worker_restarted(self, reason: str) -> None:
        """A rules shard worker was restarted (``ended``, ``hung``, ``killed``)."""
        self.families.rules_worker_restarts.labels(reason).inc()
