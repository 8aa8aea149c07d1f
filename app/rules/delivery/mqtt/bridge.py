"""What the rules service holds of MQTT: ``MqttBridge`` (publisher, outbox worker, live retained
state) when ``mqtt_url`` is set, ``NoMqtt`` when it is not. Both implement ``MqttPort``.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from app.core.errors import ConfigError
from app.core.metrics import Metrics
from app.rules.delivery.mqtt.discovery import discovery_messages, legacy_clears
from app.rules.delivery.mqtt.publisher import BrokerTarget, MqttPublisher
from app.rules.delivery.mqtt.topics import Message, Topics
from app.rules.delivery.mqtt.worker import MqttOutboxWorker
from app.rules.store.db import EventStore

if TYPE_CHECKING:
    from app.rules.site.schema import SiteConfig


@dataclass(frozen=True, slots=True)
class MqttOptions:
    """The MQTT settings (app/wiring fills them)."""

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


class MqttPort(Protocol):
    """What the rules service uses of MQTT: ``MqttBridge``, or ``NoMqtt`` when it is off."""

    @property
    def url(self) -> str | None:
        """The target's name in outbox rows (None: no MQTT rows are written)."""

    def state(self) -> dict[str, Any] | None: ...

    def start(self, snapshot: Callable[[], Iterable[Message]]) -> None: ...

    def stop(self) -> None: ...

    def notify(self) -> None: ...

    def camera_status(self, camera_id: str, status: str) -> None: ...

    def source_state(self, camera_id: str, state: str | None) -> None: ...

    def occupancy(self, camera_id: str, counts: dict[str, int]) -> None: ...

    def view_problem(self, camera_id: str, on: bool) -> None: ...

    def announce(self, config: SiteConfig) -> None: ...


class MqttBridge(MqttPort):
    """What the rules service holds: the publisher, its outbox worker, and the live state
    (camera status, zone occupancy, open events) that is retained on the broker."""

    def __init__(self, publisher: MqttPublisher, worker: MqttOutboxWorker) -> None:
        self.publisher = publisher
        self.worker = worker
        self.topics = publisher.topics
        self._sources: dict[str, str] = {}  # camera id -> its stream's state, as last published

    @classmethod
    def build(cls, options: MqttOptions, store: EventStore, metrics: Metrics) -> MqttBridge:
        if not options.topic_prefix:
            raise ConfigError("mqtt_topic_prefix may not be empty")
        target = BrokerTarget.parse(options.url, options.username, options.password or None)
        try:
            publisher = MqttPublisher(target, Topics(options.topic_prefix, options.discovery_prefix),
                                      qos=options.qos, client_id=options.client_id,
                                      ca_file=options.ca_file, ack_timeout_s=options.ack_timeout_s)
        except (OSError, ssl.SSLError) as exc:  # a missing or unreadable CA file stops startup, named
            raise ConfigError(f"CAMPUSGUARD_MQTT_CA_FILE {options.ca_file}: {exc}") from None
        return cls(publisher, MqttOutboxWorker(store, publisher, max_backoff_s=options.max_backoff_s, metrics=metrics))

    @property
    def url(self) -> str:
        return self.publisher.target.outbox_url

    def state(self) -> dict[str, Any]:
        """The outbox worker's state of the broker target, and whether it is connected now."""
        return {**self.worker.state()[0], "connected": self.publisher.connected}

    def start(self, snapshot: Callable[[], Iterable[Message]]) -> None:
        self.publisher.start(snapshot, on_connected=self.worker.notify)  # a reconnect wakes the outbox worker
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
        old-style ids of new ones are cleared, app/rules/delivery/mqtt/discovery.py)."""
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


class NoMqtt(MqttPort):
    """MQTT switched off (no ``mqtt_url``): nothing is published, no outbox rows are written."""

    url: str | None = None

    def state(self) -> None:
        return None

    def start(self, snapshot: Callable[[], Iterable[Message]]) -> None:
        pass

    def snapshot(self, *args: Any, **kwargs: Any) -> list[Message]:  # never asked: start publishes nothing
        return []

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
