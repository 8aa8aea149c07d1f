"""One Prometheus registry per app, the HTTP and frame-level families, and the packages' families.

The registry is an instance, not a module global, so each ``create_app`` (and each test)
gets clean counters. The families defined here are the ones every layer shares: HTTP
requests, refusals, authentication, detections returned, device memory, the build. Each
package owns the families it counts, in its own module, registered on this registry the
first time they are asked for (``Metrics.part``): ``app/inference/series.py`` (queue,
batches, stages, readiness, precision), ``app/rules/store/series.py``,
``app/rules/delivery/series.py`` and ``app/rules/service/series.py``. Dashboards and alert
rules in ``deploy/`` may only use names the service exports; a test scrapes a real server
and checks that.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info, ProcessCollector, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from app.core.recent import RecentWindow
from app.core.types import MemoryStats

NAMESPACE = "campusguard"
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0)
OTHER_CAMERA = "_other"
OTHER_MODEL = "_other"
# distinct ``model`` label values: the models file holds at most 32 names, runtime loads add more;
# past this many the rest count under ``_other`` (a cardinality guard, as for cameras)
MAX_MODEL_LABELS = 64
AUTH_FAILURE_REASONS = ("missing_key", "invalid_key", "insufficient_role", "throttled")
P = TypeVar("P")


class Metrics:
    """The app's registry, its shared families, and the packages' families (``part``)."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self, max_cameras: int = 500) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.recent = RecentWindow()  # detection traffic of the last 15 min (GET /status), fed with request_latency
        r, ns = self.registry, NAMESPACE
        ProcessCollector(namespace=ns, registry=r)
        self._parts: dict[Callable[..., Any], Any] = {}
        self._parts_lock = threading.Lock()
        self.requests = Counter("requests", "HTTP requests by route and status", ["route", "status"],
                                namespace=ns, registry=r)
        self.request_latency = Histogram("request_duration_seconds", "End-to-end request latency",
                                         ["route"], namespace=ns, registry=r, buckets=LATENCY_BUCKETS)
        self.detections = Counter("detections", "Detections returned, by class", ["class_name"],
                                  namespace=ns, registry=r)
        self.camera_detections = Counter("camera_detections", "Detections by camera and class (cameras capped)",
                                         ["camera_id", "class_name"], namespace=ns, registry=r)
        self.rejected = Counter("rejected_requests", "Requests refused before inference, by reason",
                                ["reason"], namespace=ns, registry=r)
        self.in_flight = Gauge("in_flight_requests", "Requests being handled", namespace=ns, registry=r)
        labels = ["device"]
        self.memory_used = Gauge("device_memory_used_bytes", "Device memory in use (tensors; RSS on CPU)",
                                 labels, namespace=ns, registry=r)
        self.memory_reserved = Gauge("device_memory_reserved_bytes", "Device memory reserved by the allocator",
                                     labels, namespace=ns, registry=r)
        self.memory_total = Gauge("device_memory_total_bytes", "Device memory capacity", labels,
                                  namespace=ns, registry=r)
        self.build_info = Info("build", "Version, backend, provider, model and device", namespace=ns, registry=r)
        # authentication (docs/security.md)
        self.auth_failures = Counter("auth_failures", "Refused authentications (401, 403, 429) by reason: missing_key, "
                                     "invalid_key, insufficient_role, throttled (the client address is blocked)",
                                     ["reason"], namespace=ns, registry=r)
        self.auth_blocks = Counter("auth_blocks", "Client addresses blocked after repeated wrong keys",
                                   namespace=ns, registry=r)
        self.key_reloads = Counter("key_reloads", "Keys-file reloads by trigger (file_changed, signal) and outcome "
                                   "(ok, refused: the running keys stayed)", ["trigger", "outcome"],
                                   namespace=ns, registry=r)
        for reason in AUTH_FAILURE_REASONS:  # every series from the first scrape: alerts see a 0 before a burst
            self.auth_failures.labels(reason)
        self._max_cameras = max_cameras
        self._cameras: set[str] = set()
        self._models: set[str] = set()
        self._labels_lock = threading.Lock()

    def part(self, kind: Callable[[Metrics], P]) -> P:
        """The families a package owns (``kind(self)`` registers them on this registry), made
        the first time they are asked for and shared after that: the composition root and
        each part that counts into them get the same object, and nothing registers twice."""
        with self._parts_lock:
            found = self._parts.get(kind)
            if found is None:
                found = self._parts[kind] = kind(self)
            return found

    def camera_label(self, camera_id: str) -> str:
        """Cap the number of distinct camera labels (cardinality guard)."""
        if camera_id in self._cameras:
            return camera_id
        if len(self._cameras) < self._max_cameras:
            self._cameras.add(camera_id)
            return camera_id
        return OTHER_CAMERA

    def model_label(self, name: str) -> str:
        """The ``model`` label of ``name``: the name itself for the first ``MAX_MODEL_LABELS`` names
        this process served (a name unloaded and loaded again keeps its label), ``_other`` after."""
        with self._labels_lock:
            if name in self._models:
                return name
            if len(self._models) < MAX_MODEL_LABELS:
                self._models.add(name)
                return name
        return OTHER_MODEL

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
