"""Sinks: the durable outbox worker and its targets (webhooks, MQTT with Home Assistant discovery). Never
knows a rule; delivers what the store holds."""
