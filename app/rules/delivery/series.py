"""The delivery families: outbox deliveries by outcome and rows waiting, for webhooks and MQTT.

Registered on the app's registry the first time a delivery part asks for them
(``DeliverySeries.of(metrics)``, ``Metrics.part``). Every outcome series starts at 0, MQTT's
too when MQTT is off, so ``rate()`` and alerts work before the first delivery.
"""

from __future__ import annotations

from prometheus_client import Counter, Gauge

from app.core.metrics import NAMESPACE, Metrics

WEBHOOK_OUTCOMES = ("delivered", "http_error", "network_error")
MQTT_OUTCOMES = ("delivered", "broker_error", "not_connected")


class DeliverySeries:
    @classmethod
    def of(cls, metrics: Metrics) -> DeliverySeries:
        return metrics.part(cls)

    def __init__(self, metrics: Metrics) -> None:
        r, ns = metrics.registry, NAMESPACE
        self.webhook_deliveries = Counter("webhook_deliveries", "Webhook delivery attempts by outcome",
                                          ["outcome"], namespace=ns, registry=r)
        self.outbox_depth = Gauge("webhook_outbox_depth", "Events waiting for webhook delivery",
                                  namespace=ns, registry=r)
        self.mqtt_deliveries = Counter("mqtt_deliveries", "MQTT outbox deliveries by outcome (delivered: every publish "
                                       "acknowledged)", ["outcome"], namespace=ns, registry=r)
        self.mqtt_outbox_depth = Gauge("mqtt_outbox_depth", "Events waiting for MQTT delivery",
                                       namespace=ns, registry=r)
        for outcome in WEBHOOK_OUTCOMES:
            self.webhook_deliveries.labels(outcome)
        for outcome in MQTT_OUTCOMES:
            self.mqtt_deliveries.labels(outcome)
