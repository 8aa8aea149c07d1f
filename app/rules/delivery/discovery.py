"""Home Assistant MQTT discovery: one retained config per entity, under ids that never collide.

An entity's id names its discovery topic (``<prefix>/binary_sensor/<node>/<id>/config``)
and its ``unique_id``, so two entities with one id are one sensor in Home Assistant and the
second never appears. Ids are made of camera, zone and rule names, which may hold ``_``,
``.`` and ``:`` (``[A-Za-z0-9][A-Za-z0-9_.:-]*``), while an id may hold only ``[A-Za-z0-9_-]``.
Until 2026-12 the name characters outside that set became ``_`` and the names were joined
with ``_``: zone ``x_y`` with rule ``z`` and zone ``x`` with rule ``y_z`` were both
``cam_x_y_z``, cameras ``a.b`` and ``a_b`` both ``a_b``.

``object_id`` is injective and depends on the names alone (stable across restarts and
replicas): letters, digits and ``-`` stay, the names are joined with ``_``, and within a
name ``_`` is written ``__``, ``.`` ``_-d``, ``:`` ``_-c`` (anything else ``_-u<hex>_``).
A name starts with a letter or digit, so after a joining ``_`` comes a letter or a digit,
after an escape's ``_`` never one: ``decode_object_id`` reads every id back to its names.
Names of letters, digits and ``-`` keep the id they had (``gate-cam_plaza_crowd``).

``legacy_clears`` are the empty retained payloads that remove the configs published under
the old ids that changed (Home Assistant deletes an entity whose config becomes empty), so
after the upgrade no orphan is left; they go out with the retained state on every connect,
where they find nothing to clear after the first time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from app.core.jsonutil import dumps

if TYPE_CHECKING:
    from app.rules.site.schema import Camera, RuleBase, SiteConfig, Zone

Message = tuple[str, bytes, bool]  # (topic, payload, retain), as app/rules/delivery/mqtt.py publishes them
# (camera, zone, rule): the zone is "view" (rule None) for the camera's view sensor, None for its status
Entity = tuple["Camera", "Zone | str | None", "RuleBase | None"]


class Topics(Protocol):
    """The topic names discovery needs (app.rules.delivery.mqtt.Topics; no import: mqtt imports this)."""

    @property
    def node(self) -> str: ...

    @property
    def discovery_prefix(self) -> str: ...

    @property
    def availability(self) -> str: ...

    def discovery(self, object_id: str) -> str: ...

    def status(self, camera: str) -> str: ...

    def source(self, camera: str) -> str: ...

    def state(self, camera: str, zone: str, rule: str) -> str: ...

    def event(self, camera: str, rule: str) -> str: ...

    def view_problem(self, camera: str) -> str: ...

ESCAPES = {"_": "__", ".": "_-d", ":": "_-c"}
UNESCAPES = {"d": ".", "c": ":"}


def _encode(name: str) -> str:
    out = []
    for c in name:
        if c.isascii() and (c.isalnum() or c == "-"):
            out.append(c)
        else:
            out.append(ESCAPES.get(c) or f"_-u{ord(c):x}_")
    return "".join(out)


def object_id(*names: str) -> str:
    """The entity id of these names (camera[, zone, rule] or camera, "status"): injective."""
    if not all(n and n[0].isascii() and n[0].isalnum() for n in names):
        raise ValueError(f"names start with a letter or digit: {names!r}")  # the site schema guarantees it
    return "_".join(_encode(n) for n in names)


def decode_object_id(text: str) -> tuple[str, ...]:
    """The names an ``object_id`` was made of (the proof that no two name lists share an id)."""
    names, current, i = [], [], 0
    while i < len(text):
        c = text[i]
        if c != "_":
            current.append(c)
            i += 1
        elif text[i + 1:i + 2] == "_":
            current.append("_")
            i += 2
        elif text[i + 1:i + 2] == "-":
            kind = text[i + 2]
            if kind == "u":
                end = text.index("_", i + 3)
                current.append(chr(int(text[i + 3:end], 16)))
                i = end + 1
            else:
                current.append(UNESCAPES[kind])
                i += 3
        else:
            names.append("".join(current))
            current = []
            i += 1
    names.append("".join(current))
    return tuple(names)


def legacy_object_id(*names: str) -> str:
    """The id the same names had before (lossy: kept only to clear what was published under it)."""
    return "_".join("".join(c if c.isalnum() or c in "_-" else "_" for c in n) for n in names)


def entities(config: SiteConfig) -> list[tuple[tuple[str, ...], Entity]]:
    """(names, (camera, zone, rule)) of every entity: a camera's status, its view (with view
    checks on; zone ``"view"`` marks it, rule None), each camera/zone/rule."""
    out: list[tuple[tuple[str, ...], Entity]] = []
    for camera in config.cameras:
        out.append(((camera.id, "status"), (camera, None, None)))
        if camera.view_checks.enabled:
            out.append(((camera.id, "view"), (camera, "view", None)))
        out.extend(((camera.id, zone.name, rule.rule_name), (camera, zone, rule))
                   for zone in camera.zones for rule in zone.rules)
    return out


def discovery_messages(topics: Topics, config: SiteConfig) -> list[Message]:
    """Retained Home Assistant discovery configs: a binary sensor per camera/zone/rule
    (ON while an event is open), a connectivity sensor per camera (its status topic) and,
    with view checks on, a ``problem`` sensor per camera (ON while a view problem is open)."""
    if not topics.discovery_prefix:
        return []
    out: list[Message] = []
    availability = [{"topic": topics.availability}]
    for names, (camera, zone, rule) in entities(config):
        device = {"identifiers": [f"{topics.node}_{object_id(camera.id)}"], "name": camera.name or camera.id,
                  "manufacturer": "CampusGuard", "model": "CampusGuard Detector"}
        if zone is None:
            entity = {"name": f"{camera.name or camera.id} camera", "device_class": "connectivity",
                      "state_topic": topics.status(camera.id), "payload_on": "online", "payload_off": "offline"}
        elif rule is None or isinstance(zone, str):  # the camera's view checks (zone "view", no rule)
            entity = {"name": f"{camera.name or camera.id} view", "device_class": "problem",
                      "state_topic": topics.view_problem(camera.id), "payload_on": "ON", "payload_off": "OFF",
                      "json_attributes_topic": topics.event(camera.id, "camera_view"),
                      "json_attributes_template": "{{ value_json.event | tojson }}"}
        else:
            entity = {"name": f"{zone.name} {rule.rule_name}", "payload_on": "ON", "payload_off": "OFF",
                      "state_topic": topics.state(camera.id, zone.name, rule.rule_name),
                      "json_attributes_topic": topics.event(camera.id, rule.rule_name),
                      "json_attributes_template": "{{ value_json.event | tojson }}"}
        oid = object_id(*names)
        body = {**entity, "unique_id": f"{topics.node}_{oid}", "object_id": f"{topics.node}_{oid}",
                "device": device, "availability": availability}
        out.append((topics.discovery(oid), dumps(body), True))
    return out + stream_messages(topics, config)


def stream_messages(topics: Topics, config: SiteConfig) -> list[Message]:
    """Per camera with a ``source:``, a connectivity sensor of its stream (ON while streaming;
    its source topic carries the state: connecting, streaming, stalled, auth_failed, ...).
    A new entity (no id of older releases to clear); ``<camera>_stream`` has two names, so it
    cannot be the id of a zone's rule."""
    out: list[Message] = []
    for camera in config.cameras:
        if camera.source is None:
            continue
        oid = object_id(camera.id, "stream")
        label = camera.name or camera.id
        body = {"name": f"{label} stream", "device_class": "connectivity", "state_topic": topics.source(camera.id),
                "value_template": "{{ 'ON' if value == 'streaming' else 'OFF' }}",
                "unique_id": f"{topics.node}_{oid}", "object_id": f"{topics.node}_{oid}",
                "device": {"identifiers": [f"{topics.node}_{object_id(camera.id)}"], "name": label,
                           "manufacturer": "CampusGuard", "model": "CampusGuard Detector"},
                "availability": [{"topic": topics.availability}]}
        out.append((topics.discovery(oid), dumps(body), True))
    return out


def legacy_clears(topics: Topics, config: SiteConfig) -> list[Message]:
    """Empty retained configs for the old ids of these entities that differ from their new ids
    (and are not the new id of another entity)."""
    if not topics.discovery_prefix:
        return []
    current = {object_id(*names) for names, _ in entities(config)}
    old = {legacy_object_id(*names) for names, _ in entities(config)}
    return [(topics.discovery(oid), b"", True) for oid in sorted(old - current)]
