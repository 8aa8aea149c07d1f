"""MQTT alerts: events from the durable outbox, retained state topics, Home Assistant discovery.

Why through the outbox: an event is written to the store together with one outbox row per
target, in one transaction (``EventStore.record``). The MQTT target is one more row whose
``url`` is the broker's URL without credentials (``mqtt://host:1883``). The row is marked
delivered only after the broker acknowledged every publish of it (PUBACK at QoS 1,
PUBCOMP at QoS 2), so a broker outage loses nothing (rows wait, with capped backoff, in
order) and replicas sharing one PostgreSQL deliver each row once (the outbox lease). A
replica killed between the broker's ack and the row's mark re-publishes once: every
payload carries its ``idempotency_key`` for subscribers that must de-duplicate.

Topics (``<prefix>`` = ``mqtt_topic_prefix``; camera, zone and rule names with ``/``,
``+`` or ``#`` have those replaced by ``_``)::

    <prefix>/availability                   online / offline (retained; offline is the LWT)
    <prefix>/events                         every event start and end (JSON envelope)
    <prefix>/<camera>/<rule>                the same envelope, per camera and rule (camera_view too)
    <prefix>/<camera>/<zone>/<rule>/state   ON while an event of that rule is open (retained)
    <prefix>/<camera>/status                online / offline (retained, camera health)
    <prefix>/<camera>/<zone>/occupancy      objects in the zone now (retained, on change)
    <prefix>/<camera>/view/problem          ON while a view problem of the camera is open (retained)
    homeassistant/binary_sensor/<node>/<object>/config   discovery (retained; ids: discovery.py)

Retained state (availability, status, occupancy, discovery) is live state, not history:
it is published directly (best effort) and re-published in full on every (re)connect,
so a broker restarted without persistence is repaired as soon as it is back.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import ssl
import threading
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from app.core import redact
from app.core.errors import ConfigError
from app.rules.delivery.discovery import discovery_messages, legacy_clears
from app.rules.delivery.outbox import OutboxWorker
from app.rules.delivery.retained import RetainedLedger
from app.rules.store.db import EventStore
from app.rules.store.outbox import OutboxItem

if TYPE_CHECKING:
    from app.rules.site.schema import SiteConfig

log = logging.getLogger("campusguard.mqtt")

Message = tuple[str, bytes, bool]  # (topic, payload, retain)
CAMERA_EVENTS = ("camera_offline", "camera_online")
NO_RULE_SENSOR = (*CAMERA_EVENTS, "camera_view")  # their state is a retained camera topic, not a rule's


class PublishFailed(Exception):
    """The broker did not acknowledge a publish (not connected, timeout, refused)."""


@dataclass(frozen=True, slots=True)
class BrokerTarget:
    """Where to connect; ``outbox_url`` (no credentials) names the target in outbox rows."""

    host: str
    port: int
    tls: bool
    username: str | None
    password: str | None

    @property
    def outbox_url(self) -> str:
        return f"{'mqtts' if self.tls else 'mqtt'}://{self.host}:{self.port}"

    @classmethod
    def parse(cls, url: str, username: str | None = None, password: str | None = None) -> BrokerTarget:
        """``mqtt://[user[:pass]@]host[:1883]`` or ``mqtts://...[:8883]``; separate user/password win."""
        parts = urlsplit(url.strip())
        if parts.scheme not in ("mqtt", "mqtts") or not parts.hostname:
            raise ConfigError("mqtt_url must look like mqtt://host:1883 or mqtts://host:8883, "
                              f"got {redact.target(url)}")
        try:
            port = parts.port or (8883 if parts.scheme == "mqtts" else 1883)
        except ValueError:
            raise ConfigError("mqtt_url has an invalid port") from None
        if parts.path not in ("", "/") or parts.query:
            raise ConfigError("mqtt_url takes no path or query (set topics with mqtt_topic_prefix)")
        user = username or (unquote(parts.username) if parts.username else None)
        secret = password or (unquote(parts.password) if parts.password else None)
        return cls(parts.hostname, port, parts.scheme == "mqtts", user, secret)


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


class MqttPublisher:
    """One paho client: connects in the background, reconnects by itself, announces
    ``availability`` online (offline as its last will) and re-publishes the retained state
    from ``snapshot()`` on every connect."""

    def __init__(self, target: BrokerTarget, topics: Topics, *, qos: int = 1, client_id: str = "",
                 ca_file: Path | None = None, ack_timeout_s: float = 5.0, reconnect_max_s: float = 10.0,
                 snapshot: Callable[[], Iterable[Message]] = lambda: ()) -> None:
        self.target, self.topics, self.qos = target, topics, qos
        self.ack_timeout_s, self.snapshot = ack_timeout_s, snapshot
        self.on_connected: Callable[[], None] = lambda: None  # the outbox worker: deliver what waited
        self.client_id = client_id or f"campusguard-{socket.gethostname()}-{os.getpid()}"
        self.client = mqtt.Client(CallbackAPIVersion.VERSION2, client_id=self.client_id, protocol=mqtt.MQTTv311)
        if target.username:
            self.client.username_pw_set(target.username, target.password)
        if target.tls:
            self.client.tls_set_context(ssl.create_default_context(cafile=str(ca_file) if ca_file else None))
        self.client.will_set(topics.availability, b"offline", qos=qos, retain=True)
        self.client.reconnect_delay_set(min_delay=1, max_delay=max(1, int(reconnect_max_s)))
        self.client.on_connect = self._on_connect
        self.client.on_disconnect = self._on_disconnect
        # Held around every publish of retained state (never while building the snapshot, which
        # takes the service's locks): two threads' publishes of one topic reach the broker in
        # the order their values were decided, so the retained value is the newest.
        self._lock = threading.Lock()
        self._last: dict[str, bytes] = {}  # retained state topic -> last payload sent
        self._seq = 0
        self._stamp: dict[str, int] = {}  # retained state topic -> ``_seq`` of its last publish
        self.ledger = RetainedLedger(self._lock, lambda t: self._last.get(t), self._retained,  # paho's late re-sends
                                     self.client.is_connected)
        self.client.on_publish = self.ledger.on_publish

    def start(self) -> None:
        self.ledger.start()
        self.client.connect_async(self.target.host, self.target.port, keepalive=30)
        self.client.loop_start()

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            if self.client.is_connected():
                self.client.publish(self.topics.availability, b"offline", qos=self.qos, retain=True).wait_for_publish(2)
        self.client.disconnect()
        self.client.loop_stop()
        self.ledger.stop()

    @property
    def connected(self) -> bool:
        return self.client.is_connected()

    def publish_acked(self, messages: list[Message]) -> None:
        """Publish and wait for the broker's ack of each; PublishFailed otherwise. Nothing is
        sent while disconnected (paho would queue it and re-send it besides the outbox's retry)."""
        if not self.client.is_connected():
            raise PublishFailed("not connected to the broker")
        with self._lock:
            infos = self._publish(messages)
            self._last.update((t, p) for t, p, r in messages if r)  # the newest decided value, from now on
        for info in infos:
            try:
                info.wait_for_publish(self.ack_timeout_s)
            except (RuntimeError, ValueError) as exc:
                raise PublishFailed(str(exc)) from None
            if not info.is_published():
                raise PublishFailed(f"no acknowledgement within {self.ack_timeout_s:.0f} s")

    def set_state(self, topic: str, payload: bytes) -> None:
        """A retained state topic, published only when it changed (live state: best effort)."""
        with self._lock:
            if self._last.get(topic) == payload:
                return
            self._last[topic] = payload
            if self.client.is_connected():
                self._retained(topic, payload)

    def _publish(self, messages: list[Message]) -> list[mqtt.MQTTMessageInfo]:
        """Under ``_lock``: publish in order, the retained state topics through ``_retained``."""
        return [self._retained(topic, payload) if retain else self.client.publish(topic, payload, qos=self.qos)
                for topic, payload, retain in messages]

    def _retained(self, topic: str, payload: bytes) -> mqtt.MQTTMessageInfo:
        """Under ``_lock``: publish a retained state topic, in the ledger and stamped (newer than
        any snapshot begun before)."""
        info = self.client.publish(topic, payload, qos=self.qos, retain=True)
        self._seq += 1
        self._stamp[topic] = self._seq
        self.ledger.sent(info, topic, payload)
        return info

    def _on_connect(self, client, userdata, flags, reason_code, properties) -> None:
        if reason_code.is_failure:
            log.warning("MQTT broker %s refused the connection: %s", self.target.outbox_url, reason_code)
            return
        log.info("connected to MQTT broker %s as %s", self.target.outbox_url, self.client_id)
        client.publish(self.topics.availability, b"online", qos=self.qos, retain=True)  # paho's thread: no waiting
        with self._lock:
            begun = self._seq
        try:
            state = list(self.snapshot())
        except Exception:  # pragma: no cover - a bug here must not stop delivery
            log.exception("could not build the retained MQTT state")
            state = []
        with self._lock:
            # a topic published since the snapshot began (the outbox delivering an event's end,
            # a camera going offline) already has a newer value on the broker: keep it
            newer = {t for t, stamp in self._stamp.items() if stamp > begun}
            state = [(t, p, r) for t, p, r in state if not (r and t in newer)]
            self._last = {t: p for t, p, r in state if r} | {t: p for t, p in self._last.items() if t in newer}
            self._publish(state)  # stamped too: a later snapshot reads only stamps newer than its own start
        self.on_connected()

    def _on_disconnect(self, client, userdata, flags, reason_code, properties) -> None:
        if reason_code != 0:
            log.warning("MQTT broker %s connection lost (%s); reconnecting", self.target.outbox_url, reason_code)


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


@dataclass(frozen=True, slots=True)
class MqttOptions:
    """The MQTT settings (app/wiring.py fills them)."""

    url: str
    username: str | None = None
    password: str = ""
    topic_prefix: str = "campusguard"
    discovery_prefix: str = "homeassistant"
    qos: int = 1
    client_id: str = ""
    ca_file: Path | None = None
    ack_timeout_s: float = 5.0
    max_backoff_s: float = 60.0


class MqttBridge:
    """What the rules service holds: the publisher, its outbox worker, and the live state
    (camera status, zone occupancy, open events) that is retained on the broker."""

    def __init__(self, publisher: MqttPublisher, worker: MqttOutboxWorker) -> None:
        self.publisher = publisher
        self.worker = worker
        self.topics = publisher.topics
        self._sources: dict[str, str] = {}  # camera id -> its stream's state, as last published

    @classmethod
    def build(cls, options: MqttOptions, store: EventStore, metrics=None) -> MqttBridge:
        if not options.topic_prefix:
            raise ConfigError("mqtt_topic_prefix may not be empty")
        target = BrokerTarget.parse(options.url, options.username, options.password or None)
        try:
            publisher = MqttPublisher(target, Topics(options.topic_prefix, options.discovery_prefix),
                                      qos=options.qos, client_id=options.client_id,
                                      ca_file=options.ca_file, ack_timeout_s=options.ack_timeout_s)
        except (OSError, ssl.SSLError) as exc:  # a missing or unreadable CA file stops startup, named
            raise ConfigError(f"CAMPUSGUARD_MQTT_CA_FILE {options.ca_file}: {exc}") from None
        worker = MqttOutboxWorker(store, publisher, max_backoff_s=options.max_backoff_s, metrics=metrics)
        publisher.on_connected = worker.notify
        return cls(publisher, worker)

    @property
    def url(self) -> str:
        return self.publisher.target.outbox_url

    def state(self) -> dict[str, Any]:
        """The outbox worker's state of the broker target, and whether it is connected now."""
        return {**self.worker.state()[0], "connected": self.publisher.connected}

    def start(self, snapshot: Callable[[], Iterable[Message]]) -> None:
        self.publisher.snapshot = snapshot
        self.publisher.start()
        self.worker.start()

    def stop(self) -> None:
        self.worker.stop()
        self.publisher.stop()

    def notify(self) -> None:
        self.worker.notify()

    def camera_status(self, camera_id: str, status: str) -> None:
        self.publisher.set_state(self.topics.status(camera_id), status.encode())

    def source_state(self, camera_id: str, state: str | None) -> None:
        """A camera stream's state (connecting, streaming, ...; None: nobody pulls it here any
        more, the retained state is cleared), for its Home Assistant stream sensor."""
        if state is None:
            self._sources.pop(camera_id, None)
        else:
            self._sources[camera_id] = state
        self.publisher.set_state(self.topics.source(camera_id), (state or "").encode())

    def occupancy(self, camera_id: str, counts: dict[str, int]) -> None:
        for zone, n in counts.items():
            self.publisher.set_state(self.topics.occupancy(camera_id, zone), str(n).encode())

    def view_problem(self, camera_id: str, on: bool) -> None:
        """The camera's view-problem sensor: ON while any view problem is open."""
        self.publisher.set_state(self.topics.view_problem(camera_id), b"ON" if on else b"OFF")

    def announce(self, config: SiteConfig) -> None:
        """Re-publish discovery after a reload (new cameras, zones or rules appear in HA; the
        old-style ids of new ones are cleared, app/rules/delivery/discovery.py)."""
        for topic, payload, _ in legacy_clears(self.topics, config) + discovery_messages(self.topics, config):
            self.publisher.set_state(topic, payload)

    def snapshot(self, config: SiteConfig, status: Callable[[str], str], counts: dict[str, dict[str, int]],
                 open_rules: set[tuple[str, str, str]], view_problems: Collection[str] = frozenset()) -> list[Message]:
        """Everything retained, as of now: discovery, then per seen camera its status,
        occupancy, the ON/OFF of each rule and of its view (``view_problems``: cameras with an
        open view problem). Cameras this replica never saw are left alone (another replica
        may be serving them)."""
        out = legacy_clears(self.topics, config) + discovery_messages(self.topics, config)
        streams = dict(self._sources)
        out += [(self.topics.source(c.id), streams[c.id].encode(), True) for c in config.cameras if c.id in streams]
        for camera in config.cameras:
            state = status(camera.id)
            if state not in ("online", "offline"):
                continue
            out.append((self.topics.status(camera.id), state.encode(), True))
            for zone_name, n in counts.get(camera.id, {}).items():
                out.append((self.topics.occupancy(camera.id, zone_name), str(n).encode(), True))
            for zone in camera.zones:
                for rule in zone.rules:
                    on = (camera.id, zone.name, rule.rule_name) in open_rules
                    out.append((self.topics.state(camera.id, zone.name, rule.rule_name), b"ON" if on else b"OFF", True))
            if camera.view_checks.enabled:
                on = camera.id in view_problems
                out.append((self.topics.view_problem(camera.id), b"ON" if on else b"OFF", True))
        return out


class NoMqtt:
    """MQTT switched off (no ``mqtt_url``): nothing is published, no outbox rows are written."""

    url: str | None = None

    def state(self) -> None:
        return None

    def start(self, snapshot: Callable[[], Iterable[Message]]) -> None:
        pass

    def stop(self) -> None:
        pass

    def notify(self) -> None:
        pass

    def camera_status(self, camera_id: str, status: str) -> None:
        pass

    def source_state(self, camera_id: str, state: str | None) -> None:
        pass

    def occupancy(self, camera_id: str, counts: dict[str, int]) -> None:
        pass

    def view_problem(self, camera_id: str, on: bool) -> None:
        pass

    def announce(self, config: SiteConfig) -> None:
        pass
