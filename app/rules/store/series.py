"""The event store's families: its connection, the write buffer, retention, the detection log, the audit trail.

Registered on the app's registry the first time a store part asks for them
(``StoreSeries.of(metrics)``, ``Metrics.part``), so a server without rules never exports them.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from app.core.metrics import NAMESPACE, Metrics


class StoreSeries:
    @classmethod
    def of(cls, metrics: Metrics) -> StoreSeries:
        return metrics.part(cls)

    def __init__(self, metrics: Metrics) -> None:
        r, ns = metrics.registry, NAMESPACE
        self.event_store_up = Gauge("event_store_up", "1 when the event store database answers (rules on only)",
                                    ["backend"], namespace=ns, registry=r)
        self.event_buffer_depth = Gauge("event_buffer_depth", "Event writes held in memory while the store is down",
                                        namespace=ns, registry=r)
        self.event_buffer_dropped = Counter("event_buffer_dropped", "Event writes dropped because the buffer was full",
                                            namespace=ns, registry=r)
        self.snapshot_bytes = Gauge("snapshot_bytes", "Disk used by event snapshots and clips (this replica)",
                                    namespace=ns, registry=r)
        self.retention_deleted = Counter("retention_deleted",
                                         "Events, snapshot/clip files (kind=snapshots), logged frames (kind=frames) "
                                         "and audit records (kind=audit) deleted by retention",
                                         ["kind"], namespace=ns, registry=r)
        self.detection_log_dropped = Counter("detection_log_dropped",
                                             "Detection-log frames dropped (buffer full, or a write failed)",
                                             namespace=ns, registry=r)
        self.audit_dropped = Counter("audit_dropped", "Audit records dropped because the buffer was full (the event "
                                     "store was unreachable for long); each is still in the log",
                                     namespace=ns, registry=r)
