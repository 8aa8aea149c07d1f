"""MQTT topic names and the Home Assistant discovery configs, computed from the site file.

Topics (``<prefix>`` = ``mqtt_topic_prefix``; camera, zone and rule names are site-file
identifiers, which cannot contain ``/``, ``+`` or ``#``, so each is one topic level as is)::

    <prefix>/availability                   online / offline (retained; offline is the LWT)
    <prefix>/events                         every event start and end (JSON envelope)
    <prefix>/<camera>/<rule>                the same envelope, per camera and rule (camera_view too)
    <prefix>/<camera>/<zone>/<rule>/state   ON while an event of that rule is open (retained)
    <prefix>/<camera>/status                online / offline (retained, camera health)
    <prefix>/<camera>/<zone>/occupancy      objects in the zone now (retained, on change)
    <prefix>/<camera>/view/problem          ON while a view problem of the camera is open (retained)
    homeassistant/binary_sensor/<node>/<object>/config   discovery (retained)

Discovery ids are injective: Home Assistant keys an entity (and a device) by its id, so two
entities must never share one. The readable id joins the names with ``_`` and maps other
characters to ``_``, which can collide (camera ``a.b`` and ``a_b``; camera ``x_y``'s status
and camera ``x``'s zone ``y`` with a rule named ``status``); the entities whose readable ids
collide get a suffix made from the exact names instead, and every other entity keeps the
readable id it always had (existing Home Assistant entities keep their ids).
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from app.core.jsonutil import dumps

if TYPE_CHECKING:
    from app.rules.site.schema import SiteConfig

Message = tuple[str, bytes, bool]  # (topic, payload, retain)


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

    def occupancy(self, camera: str, zone: str) -> str:
        return f"{self.prefix}/{topic_part(camera)}/{topic_part(zone)}/occupancy"

    def view_problem(self, camera: str) -> str:
        """Depth 3 and ending in ``problem``: no occupancy (``.../occupancy``), state (depth 4)
        or event topic (depth 2) can be equal to it."""
        return f"{self.prefix}/{topic_part(camera)}/view/problem"

    def discovery(self, object_id: str) -> str:
        return f"{self.discovery_prefix}/binary_sensor/{self.node}/{object_id}/config"


def readable_id(*names: str) -> str:
    """The names joined with ``_``, each character outside ``[A-Za-z0-9_-]`` as ``_``."""
    return "_".join("".join(c if c.isalnum() or c in "_-" else "_" for c in n) for n in names)


def injective_ids(keys: list[tuple[str, ...]]) -> dict[tuple[str, ...], str]:
    """An id per key (``(kind, *names)``): the readable id of the names where no other key
    shares it, else the readable id plus 8 hex of a hash of the exact key."""
    readable = {key: readable_id(*key[1:]) for key in keys}
    seen = Counter(readable.values())
    out = {}
    for key, rid in readable.items():
        if seen[rid] > 1:
            rid += "_" + hashlib.sha256("\0".join(key).encode()).hexdigest()[:8]
        out[key] = rid
    return out


def discovery_messages(topics: Topics, config: "SiteConfig") -> list[Message]:
    """Retained Home Assistant discovery configs: per camera a connectivity sensor (its status
    topic) and, with view checks on, a ``problem`` sensor (ON while a view problem is open),
    and a binary sensor per camera/zone/rule (ON while an event is open)."""
    if not topics.discovery_prefix:
        return []
    entities: list[tuple[tuple[str, ...], str, dict[str, Any]]] = []  # (id key, camera id, config)
    for camera in config.cameras:
        label = camera.name or camera.id
        entities.append((("status", camera.id, "status"), camera.id, {
            "name": f"{label} camera", "device_class": "connectivity",
            "state_topic": topics.status(camera.id), "payload_on": "online", "payload_off": "offline"}))
        if camera.view_checks.enabled:
            entities.append((("view", camera.id, "view"), camera.id, {
                "name": f"{label} view", "device_class": "problem", "state_topic": topics.view_problem(camera.id),
                "payload_on": "ON", "payload_off": "OFF",
                "json_attributes_topic": topics.event(camera.id, "camera_view"),
                "json_attributes_template": "{{ value_json.event | tojson }}"}))
        for zone in camera.zones:
            for rule in zone.rules:
                name = rule.rule_name
                entities.append((("rule", camera.id, zone.name, name), camera.id, {
                    "name": f"{zone.name} {name}", "state_topic": topics.state(camera.id, zone.name, name),
                    "payload_on": "ON", "payload_off": "OFF",
                    "json_attributes_topic": topics.event(camera.id, name),
                    "json_attributes_template": "{{ value_json.event | tojson }}"}))
    ids = injective_ids([key for key, _, _ in entities])
    devices = injective_ids([("device", c.id) for c in config.cameras])
    names = {c.id: c.name or c.id for c in config.cameras}
    out: list[Message] = []
    for key, camera_id, entity in entities:
        object_id = ids[key]
        device = {"identifiers": [f"{topics.node}_{devices[('device', camera_id)]}"], "name": names[camera_id],
                  "manufacturer": "CampusGuard", "model": "CampusGuard Detector"}
        body = {**entity, "unique_id": f"{topics.node}_{object_id}", "object_id": f"{topics.node}_{object_id}",
                "device": device, "availability": [{"topic": topics.availability}]}
        out.append((topics.discovery(object_id), dumps(body), True))
    return out
