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
import queue
import threading
from collections.abc import Callable

import paho.mqtt.client as mqtt

log = logging.getLogger("campusguard.rules.mqtt")


class RetainedLedger:
    def __init__(self, lock: threading.Lock, wanted: Callable[[str], bytes | None],
                 publish: Callable[[str, bytes], object], connected: Callable[[], bool]) -> None:
        self._lock, self._wanted, self._publish, self._connected = lock, wanted, publish, connected
        self._sent: dict[int, tuple[str, bytes]] = {}  # message id -> (topic, payload), until acknowledged
        self._in_flight: dict[str, set[int]] = {}
        self._acks: queue.SimpleQueue[int | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None

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
        self._acks.put(mid)  # paho's lock is held here: hand over, never wait

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="mqtt-retained", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._acks.put(None)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _run(self) -> None:
        while (mid := self._acks.get()) is not None:
            try:
                with self._lock:
                    self._acked(mid)
            except Exception:  # never end the thread: the queue would grow and corrections stop
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
