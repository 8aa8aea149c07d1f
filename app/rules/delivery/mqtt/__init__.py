"""MQTT alerts: events from the durable outbox, retained state topics, Home Assistant discovery.

The parts: ``topics.py`` (names and an event's publishes), ``publisher.py`` (the broker
connection), ``worker.py`` (the outbox worker), ``bridge.py`` (what the rules service holds:
``MqttBridge`` / ``NoMqtt``), ``discovery.py`` (Home Assistant) and ``retained.py`` (repairs
paho's late re-sends of retained state).

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

from app.rules.delivery.mqtt.bridge import MqttBridge, MqttOptions, MqttPort, NoMqtt
from app.rules.delivery.mqtt.topics import Message

__all__ = ["Message", "MqttBridge", "MqttOptions", "MqttPort", "NoMqtt"]
