"""One Prometheus registry per app and every metric the service exports.

The registry is an instance, not a module global, so each ``create_app`` (and each test)
gets clean counters. Dashboards and alert rules in ``deploy/`` may only use names defined
here; a test scrapes a real server and checks that.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from app.core.recent import RecentWindow
from app.core.types import Counters, MemoryStats

NAMESPACE = "campusguard"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)
VIEW_CHECK_BUCKETS = (0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1)  # budget: 2 ms per check
BATCH_BUCKETS = (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 64)
STAGES = ("decode", "queue_wait", "preprocess", "inference", "postprocess")
OTHER_CAMERA = "_other"
AUTH_FAILURE_REASONS = ("missing_key", "invalid_key", "insufficient_role", "throttled")


class _PipelineCollector(Collector):
    """Reads ``app.inference.pipeline.Counters`` at scrape time; zeros until an engine exists."""

    def __init__(self) -> None:
        self.counters: Counters | None = None
        self._started = time.time()

    def collect(self):
        c = self.counters
        ns = NAMESPACE
        yield CounterMetricFamily(f"{ns}_inferences", "Inference calls (batches)", value=c.inferences if c else 0)
        yield CounterMetricFamily(f"{ns}_images", "Images inferred", value=c.images if c else 0)
        yield CounterMetricFamily(f"{ns}_cache_clears", "Allocator cache releases", value=c.cache_clears if c else 0)
        yield GaugeMetricFamily(f"{ns}_last_cache_clear_timestamp_seconds", "Unix time of the last cache release",
                                value=c.last_cache_clear if c else self._started)


class Metrics:
    """Metric families of the service, bound to one registry."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, max_cameras: int = 500) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.recent = RecentWindow()  # detection traffic of the last 15 min (GET /status), fed with request_latency
        r, ns = self.registry, NAMESPACE
        ProcessCollector(namespace=ns, registry=r)
        self.requests = Counter("requests", "HTTP requests by route and status", ["route", "status"],
                                namespace=ns, registry=r)
        self.request_latency = Histogram("request_duration_seconds", "End-to-end request latency",
                                         ["route"], namespace=ns, registry=r, buckets=LATENCY_BUCKETS)
        self.stage_latency = Histogram("stage_duration_seconds", "Per-image latency of each pipeline stage",
                                       ["stage"], namespace=ns, registry=r, buckets=LATENCY_BUCKETS)
        self.batch_size = Histogram("batch_size", "Images per inference call (micro-batch size)",
                                    namespace=ns, registry=r, buckets=BATCH_BUCKETS)
        self.queue_depth = Gauge("queue_depth", "Images waiting for the inference worker", namespace=ns, registry=r)
        self.queue_capacity = Gauge("queue_capacity", "Configured queue size", namespace=ns, registry=r)
        self._pipeline = _PipelineCollector()
        r.register(self._pipeline)
        self.detections = Counter("detections", "Detections returned, by class", ["class_name"],
                                  namespace=ns, registry=r)
        self.camera_detections = Counter("camera_detections", "Detections by camera and class (cameras capped)",
                                         ["camera_id", "class_name"], namespace=ns, registry=r)
        self.rejected = Counter("rejected_requests", "Requests refused before inference, by reason",
                                ["reason"], namespace=ns, registry=r)
        self.inference_errors = Counter("inference_errors", "Failed inference batches, by error code",
                                        ["code"], namespace=ns, registry=r)
        self.oom_retries = Counter("oom_retries", "Batches retried at a smaller size after device OOM",
                                   namespace=ns, registry=r)
        self.worker_restarts = Counter("worker_restarts", "Inference worker restarts", namespace=ns, registry=r)
        self.rules_worker_restarts = Counter("rules_worker_restarts", "Rules shard workers restarted, by reason "
                                             "(ended: the process died; hung: no answer within "
                                             "CAMPUSGUARD_RULES_WORKER_TIMEOUT_S, killed)", ["reason"],
                                             namespace=ns, registry=r)
        self.watchdog_trips = Counter("watchdog_trips", "Inferences that exceeded the watchdog limit",
                                      namespace=ns, registry=r)
        self.ready = Gauge("ready", "1 when the model is loaded, warm and the worker is alive",
                           namespace=ns, registry=r)
        self.in_flight = Gauge("in_flight_requests", "Requests being handled", namespace=ns, registry=r)
        labels = ["device"]
        self.memory_used = Gauge("device_memory_used_bytes", "Device memory in use (tensors; RSS on CPU)",
                                 labels, namespace=ns, registry=r)
        self.memory_reserved = Gauge("device_memory_reserved_bytes", "Device memory reserved by the allocator",
                                     labels, namespace=ns, registry=r)
        self.memory_total = Gauge("device_memory_total_bytes", "Device memory capacity", labels,
                                  namespace=ns, registry=r)
        self.precision_fallback = Gauge("precision_fallback", "1 when the requested precision failed its gate and "
                                        "fp32 is served instead", ["requested"], namespace=ns, registry=r)
        self.precision_gate_passed = Gauge("precision_gate_passed", "1 when the precision passed its gate against fp32",
                                           ["precision", "metric"], namespace=ns, registry=r)
        self.precision_gate_value = Gauge("precision_gate_value", "The gate's measurement: mAP50-95 drop (labelled) "
                                          "or F1 agreement with fp32 (unlabelled)", ["precision", "metric"],
                                          namespace=ns, registry=r)
        self.build_info = Info("build", "Version, backend, provider, model and device", namespace=ns, registry=r)
        # campus-security rules
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
        self.webhook_deliveries = Counter("webhook_deliveries", "Webhook delivery attempts by outcome",
                                          ["outcome"], namespace=ns, registry=r)
        self.outbox_depth = Gauge("webhook_outbox_depth", "Events waiting for webhook delivery",
                                  namespace=ns, registry=r)
        self.mqtt_deliveries = Counter("mqtt_deliveries", "MQTT outbox deliveries by outcome (delivered: every publish "
                                       "acknowledged)", ["outcome"], namespace=ns, registry=r)
        self.mqtt_outbox_depth = Gauge("mqtt_outbox_depth", "Events waiting for MQTT delivery",
                                       namespace=ns, registry=r)
        self.event_store_up = Gauge("event_store_up", "1 when the event store database answers (rules on only)",
                                    ["backend"], namespace=ns, registry=r)
        self.event_buffer_depth = Gauge("event_buffer_depth", "Event writes held in memory while the store is down",
                                        namespace=ns, registry=r)
        self.camera_frame_age = Gauge("camera_last_frame_age_seconds",
                                      "Seconds since the camera's last frame reached this replica (NaN: never)",
                                      ["camera_id"], namespace=ns, registry=r)
        self.camera_offline_after = Gauge("camera_offline_after_seconds", "The camera's offline_after_s",
                                          ["camera_id"], namespace=ns, registry=r)
        self.snapshot_bytes = Gauge("snapshot_bytes", "Disk used by event snapshots and clips (this replica)",
                                    namespace=ns, registry=r)
        self.retention_deleted = Counter("retention_deleted",
                                         "Events, snapshot/clip files (kind=snapshots), logged frames (kind=frames) "
                                         "and audit records (kind=audit) deleted by retention",
                                         ["kind"], namespace=ns, registry=r)
        self.event_buffer_dropped = Counter("event_buffer_dropped", "Event writes dropped because the buffer was full",
                                            namespace=ns, registry=r)
        self.detection_log_dropped = Counter("detection_log_dropped",
                                             "Detection-log frames dropped (buffer full, or a write failed)",
                                             namespace=ns, registry=r)
        # authentication and the audit trail (docs/security.md)
        self.auth_failures = Counter("auth_failures", "Refused authentications (401, 403, 429) by reason: missing_key, "
                                     "invalid_key, insufficient_role, throttled (the client address is blocked)",
                                     ["reason"], namespace=ns, registry=r)
        self.auth_blocks = Counter("auth_blocks", "Client addresses blocked after repeated wrong keys",
                                   namespace=ns, registry=r)
        self.key_reloads = Counter("key_reloads", "Keys-file reloads by trigger (file_changed, signal) and outcome "
                                   "(ok, refused: the running keys stayed)", ["trigger", "outcome"],
                                   namespace=ns, registry=r)
        self.audit_dropped = Counter("audit_dropped", "Audit records dropped because the buffer was full (the event "
                                     "store was unreachable for long); each is still in the log",
                                     namespace=ns, registry=r)
        for reason in AUTH_FAILURE_REASONS:  # every series from the first scrape: alerts see a 0 before a burst
            self.auth_failures.labels(reason)
        self._max_cameras = max_cameras
        self._cameras: set[str] = set()
        for stage in STAGES:  # so every stage series exists from the first scrape
            self.stage_latency.labels(stage)

    def track_pipeline(self, counters: Counters) -> None:
        """Export the pipeline's own counts (inferences, images, cache releases): they are
        counted once, where they happen, and read here at scrape time."""
        self._pipeline.counters = counters

    def camera_label(self, camera_id: str) -> str:
        """Cap the number of distinct camera labels (cardinality guard)."""
        if camera_id in self._cameras:
            return camera_id
        if len(self._cameras) < self._max_cameras:
            self._cameras.add(camera_id)
            return camera_id
        return OTHER_CAMERA

    def count_detections(self, class_names: list[str], camera_id: str | None = None) -> None:
        """Detections returned to a client, by class (and by camera when one was named);
        every detection route reports through here so the counters mean one thing."""
        camera = self.camera_label(camera_id) if camera_id else None
        for name in class_names:
            self.detections.labels(name).inc()
            if camera is not None:
                self.camera_detections.labels(camera, name).inc()

    def observe_memory(self, device: str, stats: MemoryStats) -> None:
        self.memory_used.labels(device).set(stats.used)
        self.memory_reserved.labels(device).set(stats.reserved)
        if stats.total is not None:
            self.memory_total.labels(device).set(stats.total)

    def render(self) -> bytes:
        return generate_latest(self.registry)
