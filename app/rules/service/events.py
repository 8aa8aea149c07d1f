"""Persisting events and fanning them out to every delivery target, in one step.

An event start or end is written to the store together with one outbox row per target
(each webhook URL, the MQTT broker) in one transaction, by the writer's thread, off the
frame path (app/rules/store/writer.py); the targets' outbox workers are woken once it is
stored. The
envelope is the same for every target, and its ``idempotency_key`` (``<event id>:<kind>``)
lets receivers drop the duplicate a crash between delivery and marking can cause.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from app.core.jsonutil import dumps
from app.rules.delivery.mqtt import MqttBridge, NoMqtt
from app.rules.delivery.webhooks import WebhookWorker
from app.rules.store.writer import EventWriter


class EventSink:
    def __init__(self, writer: EventWriter, webhooks: WebhookWorker, mqtt: MqttBridge | NoMqtt) -> None:
        self.writer = writer
        self.webhooks = webhooks
        self.mqtt = mqtt

    @property
    def targets(self) -> list[str]:
        return list(self.webhooks.urls) + ([self.mqtt.url] if self.mqtt.url else [])

    def persist(self, data: Mapping[str, Any], kind: str) -> None:
        """Store an event's start or end (``kind``) with its deliveries, then wake the workers."""
        key = f"{data['id']}:{kind}"
        targets = self.targets
        deliveries = []
        if targets:
            payload = dumps({"type": f"event.{kind}", "idempotency_key": key, "event": data})
            deliveries = [(url, key, payload) for url in targets]
        self.writer.write(data, deliveries)  # the writer wakes the workers once it is stored

    def delivery_state(self) -> dict[str, Any]:
        """Webhook targets' and the MQTT broker's delivery state (GET /status)."""
        return {"webhooks": self.webhooks.state(), "mqtt": self.mqtt.state()}


def wake_targets(webhooks: WebhookWorker, mqtt: MqttBridge | NoMqtt) -> Callable[[], None]:
    """What the event writer is built with (``on_stored``): once buffered events reach the store,
    every target's outbox worker wakes to deliver them."""
    def wake() -> None:
        webhooks.notify()
        mqtt.notify()

    return wake
