"""What the broker retains for each retained state topic, read from its acknowledgements.

Why: paho re-sends a QoS 1 publish that a dropped connection left unacknowledged *after* the
reconnect's ``on_connect`` has published the snapshot of the service's state (paho 2.2,
``_handle_connack``). A camera's "online" sent as the link died would then land after the
snapshot's "offline" and stay retained, hiding a camera that stopped seeing. The broker
handles one connection's publishes in order and acknowledges them in that order, so the
last acknowledged publish of a topic is what it retains: when that is not the value the
service wants and nothing newer for the topic is in flight, the value is published again.

paho calls ``on_publish`` in its network thread with its own message lock held, while the
publisher holds its lock around ``publish()``; so the callback only hands the ack over, and
a thread of this ledger does the rest under the publisher's lock.
"""

from __future__ import annotations

import logging
import threading
from collections import deque
from collections.abc import Callable

import paho.mqtt.client as mqtt

from app.core.background import BackgroundLoop

log = logging.getLogger("campusguard.rules.mqtt")


class RetainedLedger:
    def __init__(self, lock: threading.Lock, wanted: Callable[[str], bytes | None],
                 publish: Callable[[str, bytes], object], connected: Callable[[], bool]) -> None:
        self._lock, self._wanted, self._publish, self._connected = lock, wanted, publish, connected
        self._sent: dict[int, tuple[str, bytes]] = {}  # message id -> (topic, payload), until acknowledged
        self._in_flight: dict[str, set[int]] = {}
        self._acks: deque[int] = deque()  # acknowledged message ids, handed over by paho's thread
        self._loop = BackgroundLoop("mqtt-retained", self._run)

    def sent(self, info: mqtt.MQTTMessageInfo, topic: str, payload: bytes) -> None:
        """Under the publisher's lock, right after ``publish()`` of a retained state topic. Only a
        message paho will deliver counts (sent, or queued while disconnected); a message id paho
        reuses forgets the old message."""
        if info.rc not in (mqtt.MQTT_ERR_SUCCESS, mqtt.MQTT_ERR_NO_CONN):
            return
        mid = info.mid
        old = self._sent.get(mid)
        if old is not None:
            self._in_flight.get(old[0], set()).discard(mid)
        self._sent[mid] = (topic, payload)
        self._in_flight.setdefault(topic, set()).add(mid)

    def on_publish(self, client, userdata, mid: int, reason_code, properties) -> None:
        self._acks.append(mid)  # paho's lock is held here: hand over, never wait
        self._loop.wake()

    def start(self) -> None:
        self._loop.start()

    def stop(self) -> None:
        self._loop.stop(timeout=5)

    def _run(self, loop: BackgroundLoop) -> None:
        while not loop.stopping:
            loop.wait(1.0)
            self._drain()
        self._drain()  # the acks that came before stop()

    def _drain(self) -> None:
        """Every ack handed over so far, in order, under the publisher's lock taken once."""
        if not self._acks:
            return
        with self._lock:
            while self._acks:
                mid = self._acks.popleft()
                try:
                    self._acked(mid)
                except Exception:  # never end the thread: acks would pile up and corrections stop
                    log.exception("retained MQTT state: could not handle the ack of message %s", mid)

    def _acked(self, mid: int) -> None:
        entry = self._sent.pop(mid, None)
        if entry is None:
            return  # not a retained state publish (events, availability)
        topic, payload = entry
        pending = self._in_flight.get(topic, set())
        pending.discard(mid)
        if pending:
            return  # a newer value of the topic is on its way
        self._in_flight.pop(topic, None)
        want = self._wanted(topic)
        if want is not None and want != payload and self._connected():  # disconnected: the next snapshot
            self._publish(topic, want)
