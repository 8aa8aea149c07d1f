"""The MQTT topic tree (the list: ``app/rules/delivery/mqtt/__init__.py``) and an event's publishes.

Names become single topic levels (``topic_part``), so a camera, zone or rule name can never
reach another camera's topics or subscribe a wildcard. A new retained topic gets its name
here and its publisher in ``bridge.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

Message = tuple[str, bytes, bool]  # (topic, payload, retain)
CAMERA_EVENTS = ("camera_offline", "camera_online")
NO_RULE_SENSOR = (*CAMERA_EVENTS, "camera_view")  # their state is a retained camera topic, not a rule's


def topic_part(name: str) -> str:
    """A name as one topic level: the MQTT separators and wildcards cannot appear in it."""
    return "".join("_" if c in "/+#\0" else c for c in name) or "_"


@dataclass(frozen=True, slots=True)
class Topics:
    prefix: str
    discovery_prefix: str = "homeassistant"

    @property
    def node(self) -> str:
        """Home Assistant node id: the prefix, so every replica announces the same entities."""
        return "".join(c if c.isalnum() or c in "_-" else "_" for c in self.prefix)

    @property
    def availability(self) -> str:
        return f"{self.prefix}/availability"

    @property
    def events(self) -> str:
        return f"{self.prefix}/events"

    def event(self, camera: str, rule: str) -> str:
        return f"{self.prefix}/{topic_part(camera)}/{topic_part(rule)}"

    def state(self, camera: str, zone: str, rule: str) -> str:
        return f"{self.prefix}/{topic_part(camera)}/{topic_part(zone)}/{topic_part(rule)}/state"

    def status(self, camera: str) -> str:
        return f"{self.prefix}/{topic_part(camera)}/status"

    def source(self, camera: str) -> str:
        return f"{self.prefix}/{topic_part(camera)}/source"

    def occupancy(self, camera: str, zone: str) -> str:
        return f"{self.prefix}/{topic_part(camera)}/{topic_part(zone)}/occupancy"

    def view_problem(self, camera: str) -> str:
        """Depth 3 and ending in ``problem``: no occupancy (``.../occupancy``), state (depth 4)
        or event topic (depth 2) can be equal to it."""
        return f"{self.prefix}/{topic_part(camera)}/view/problem"

    def discovery(self, object_id: str) -> str:
        return f"{self.discovery_prefix}/binary_sensor/{self.node}/{object_id}/config"


def event_messages(topics: Topics, payload: bytes) -> list[Message]:
    """The publishes of one outbox row (a webhook envelope): the event twice, and the
    ON/OFF state of its binary sensor (retained). Camera health and view events have no
    sensor of their own: their state is the retained status and view/problem topics."""
    envelope = json.loads(payload)
    event = envelope["event"]
    out: list[Message] = [(topics.events, payload, False),
                          (topics.event(event["camera_id"], event["rule"]), payload, False)]
    if event["rule"] not in NO_RULE_SENSOR:
        on = envelope["type"] == "event.started"
        out.append((topics.state(event["camera_id"], event["zone"], event["rule"]), b"ON" if on else b"OFF", True))
    return out
