"""The broker connection: one paho client that reconnects by itself and acknowledges each publish.

``publish_acked`` waits for the broker's ack (PUBACK at QoS 1, PUBCOMP at QoS 2), which is
what lets the outbox worker mark a row delivered. Retained state topics are published in
the order their values were decided and re-published in full on every (re)connect
(``snapshot``); paho's late re-sends of an older value are repaired by ``RetainedLedger``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote, urlsplit

import paho.mqtt.client as mqtt
from paho.mqtt.enums import CallbackAPIVersion

from app.core import redact
from app.core.errors import ConfigError
from app.rules.delivery.mqtt.retained import RetainedLedger
from app.rules.delivery.mqtt.topics import Message, Topics

log = logging.getLogger("campusguard.mqtt")


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

    def start(self, snapshot: Callable[[], Iterable[Message]] | None = None,
              on_connected: Callable[[], None] | None = None) -> None:  # both run on every connect
        self.snapshot, self.on_connected = snapshot or self.snapshot, on_connected or self.on_connected
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
