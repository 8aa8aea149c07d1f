"""The MQTT target's outbox worker: a row is delivered once the broker acknowledged all its publishes.

Same claiming, order, leases and capped backoff as the webhooks (``app/rules/delivery/outbox.py``);
while the broker is away nothing is claimed, and the reconnect wakes the worker.
"""

from __future__ import annotations

import contextlib
from typing import Any

from app.rules.delivery.mqtt.publisher import MqttPublisher, PublishFailed
from app.rules.delivery.mqtt.topics import event_messages
from app.rules.delivery.outbox import OutboxWorker
from app.rules.store.db import EventStore
from app.rules.store.outbox import OutboxItem


class MqttOutboxWorker(OutboxWorker):
    """The outbox worker of the MQTT target: same claiming, order, leases and backoff as
    webhooks; a row is delivered when the broker acknowledged all its publishes."""

    kind = "mqtt"
    deliveries_metric = "mqtt_deliveries"
    depth_metric = "mqtt_outbox_depth"

    def __init__(self, store: EventStore, publisher: MqttPublisher, **kwargs: Any) -> None:
        super().__init__(store, [publisher.target.outbox_url], timeout_s=publisher.ack_timeout_s, **kwargs)
        self.publisher = publisher

    def _session(self):
        return contextlib.nullcontext(self.publisher)

    def drain_once(self, client: MqttPublisher) -> float:
        """While disconnected nothing is claimed: rows keep no backoff from the outage, and
        the reconnect wakes the worker to deliver them at once, in order."""
        if not client.connected:
            self._update_depth()
            return self.poll_s
        return super().drain_once(client)

    def _deliver(self, client: MqttPublisher, item: OutboxItem) -> bool:
        try:
            client.publish_acked(event_messages(client.topics, item.payload))
        except PublishFailed as exc:
            return self._failed(item, "not_connected" if not client.connected else "broker_error", str(exc))
        return self._delivered(item)
