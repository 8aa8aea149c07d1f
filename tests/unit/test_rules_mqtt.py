"""MQTT alerts against a real Mosquitto broker: topics and payloads, retained state, Home
Assistant discovery, and a broker restart mid-stream that loses no event."""

from __future__ import annotations

import json
import threading
import time

import pytest
import yaml
from pydantic import ValidationError

from app.config import Settings
from app.core.errors import ConfigError
from app.core.jsonutil import dumps
from app.core.metrics import Metrics
from app.rules.delivery.mqtt import MqttBridge
from app.rules.delivery.mqtt.publisher import BrokerTarget, MqttPublisher
from app.rules.delivery.mqtt.topics import Topics, event_messages, topic_part
from app.rules.service.facade import RulesService
from app.rules.store.db import EventStore
from app.wiring import build_rules, mqtt_options
from tests.support.mqtt_broker import Mosquitto, Subscriber, find_mosquitto
from tests.support.net import free_port
from tests.support.rules_util import H, W, at, people
from tests.support.viewcheck import Camera, tape

SITE = {"cameras": [{"id": "gate-cam", "name": "North gate", "zones": [
    {"name": "plaza", "polygon": [[0, 0.5], [1, 0.5], [1, 1], [0, 1]],
     "rules": [{"type": "crowd", "min_count": 3, "min_duration_s": 0, "clear_after_s": 0, "cooldown_s": 0}]}]}]}
REQUIRED_HA_KEYS = ("name", "unique_id", "state_topic", "device", "availability")


@pytest.fixture
def service(tmp_path, mosquitto):
    made = []

    def factory(site: dict = SITE, **settings) -> RulesService:
        path = tmp_path / "site.yaml"
        path.write_text(yaml.safe_dump(site))
        s = Settings(site_config=path, events_db_url=f"sqlite:///{tmp_path}/events.db", snapshot_dir=tmp_path / "s",
                     clips=False, mqtt_url=mosquitto.url, webhook_max_backoff_s=1.0, webhook_timeout_s=2.0,
                     **settings)
        metrics = Metrics()
        svc = build_rules(s, metrics)
        svc.test_metrics = metrics
        svc.start()
        made.append(svc)
        return svc

    yield factory
    for svc in made:
        svc.stop()


@pytest.fixture
def subscribe(mosquitto):
    subs = []

    def factory(topic: str = "#") -> Subscriber:
        subs.append(Subscriber(mosquitto.port, topic))
        return subs[-1]

    yield factory
    for sub in subs:
        sub.close()


def crowd_event(svc: RulesService, t0: float) -> list[dict]:
    """Three people in the plaza for a frame, then nobody: one event started and ended."""
    return (svc.evaluate("gate-cam", at(t0), (W, H), people(3))
            + svc.evaluate("gate-cam", at(t0 + 1), (W, H), []))


def eventually(check, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


def envelopes(payloads: list[bytes]) -> list[dict]:
    return [json.loads(p) for p in payloads]


def test_broker_url_parsing_and_settings():
    t = BrokerTarget.parse("mqtts://alice:s%40cret@broker.lan")
    assert (t.host, t.port, t.tls, t.username, t.password) == ("broker.lan", 8883, True, "alice", "s@cret")
    assert t.outbox_url == "mqtts://broker.lan:8883"  # outbox rows never hold the password
    t = BrokerTarget.parse("mqtt://broker.lan:1884", "bob", "pw")
    assert (t.port, t.tls, t.username, t.password, t.outbox_url) == (1884, False, "bob", "pw", "mqtt://broker.lan:1884")
    for bad in ("http://broker", "mqtt://", "mqtt://h:99999", "mqtt://h/topic"):
        with pytest.raises(ConfigError):
            BrokerTarget.parse(bad)
    with pytest.raises(ValidationError, match="mqtt_url"):
        Settings(mqtt_url="tcp://broker:1883")
    with pytest.raises(ValidationError, match="mqtt_qos"):
        Settings(mqtt_qos=0)  # no ack at QoS 0: an outbox row could never be known delivered
    with pytest.raises(ValidationError, match="prefix"):
        Settings(mqtt_topic_prefix="site/#")
    assert Settings(mqtt_topic_prefix="/site/a/").mqtt_topic_prefix == "site/a"


def test_bad_ca_file_stops_startup(tmp_path):
    garbage = tmp_path / "ca.pem"
    garbage.write_text("not a certificate")
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    for ca in (tmp_path / "missing.pem", garbage):
        with pytest.raises(ConfigError, match="MQTT_CA_FILE"):
            MqttBridge.build(mqtt_options(Settings(mqtt_url="mqtts://broker.lan", mqtt_ca_file=ca)), store, Metrics())
    store.close()


def test_topic_levels_cannot_inject_wildcards():
    assert topic_part("a/b+c#") == "a_b_c_"
    msgs = event_messages(Topics("cg"), json.dumps({"type": "event.ended", "event": {
        "camera_id": "cam/1", "zone": "z", "rule": "crowd"}}).encode())
    assert [(t, r) for t, _, r in msgs] == [("cg/events", False), ("cg/cam_1/crowd", False),
                                            ("cg/cam_1/z/crowd/state", True)]
    assert msgs[2][1] == b"OFF"


def test_events_arrive_as_json_on_their_topics(service, subscribe):
    sub = subscribe("campusguard/#")
    svc = service()
    sub.wait_for(lambda m: ("campusguard/availability", b"online", True) in m or
                 any(t == "campusguard/availability" and p == b"online" for t, p, _ in m))
    events = crowd_event(svc, 0)
    assert [e["state"] for e in events] == ["started", "ended"]
    event_id = events[0]["id"]
    sub.wait_for(lambda m: len([1 for t, *_ in m if t == "campusguard/gate-cam/crowd"]) == 2)
    sub.wait_for(lambda m: len([1 for t, *_ in m if t == "campusguard/events"]) == 2)
    for topic in ("campusguard/events", "campusguard/gate-cam/crowd"):
        got = envelopes(sub.on(topic))
        assert [g["type"] for g in got] == ["event.started", "event.ended"]
        assert [g["idempotency_key"] for g in got] == [f"{event_id}:started", f"{event_id}:ended"]
        assert got[1]["event"]["id"] == event_id and got[1]["event"]["zone"] == "plaza"
        assert got[1]["event"]["ended_at"] == "2026-03-02T12:00:01Z" and got[0]["event"]["max_count"] == 3
    sub.wait_for(lambda m: sub.on("campusguard/gate-cam/plaza/crowd/state")[-1:] == [b"OFF"])
    assert b"ON" in sub.on("campusguard/gate-cam/plaza/crowd/state")
    sub.wait_for(lambda m: sub.on("campusguard/gate-cam/plaza/occupancy")[-2:] == [b"3", b"0"])
    assert sub.on("campusguard/gate-cam/status") == [b"online"]  # once: only changes are published
    reg = svc.test_metrics.registry  # rows are marked (and counted) once their PUBACKs are processed
    eventually(lambda: reg.get_sample_value("campusguard_mqtt_deliveries_total", {"outcome": "delivered"}) == 2)
    eventually(lambda: reg.get_sample_value("campusguard_mqtt_outbox_depth") == 0)


def test_a_state_published_while_the_connect_snapshot_is_built_is_not_overwritten(mosquitto, subscribe):
    """The retained state of a (re)connect is a snapshot of the service; an event's end that
    the outbox delivers while that snapshot is being built is newer, and must stay retained."""
    topics = Topics("race")
    topic = topics.state("gate-cam", "plaza", "crowd")
    publisher = MqttPublisher(BrokerTarget.parse(mosquitto.url), topics, client_id=f"race-{free_port()}")

    outbox, handed_to_paho = [], threading.Event()
    publish = publisher.client.publish

    def watched_publish(t, payload=None, *args, **kwargs):
        info = publish(t, payload, *args, **kwargs)
        if t == topic and payload == b"OFF":
            handed_to_paho.set()
        return info

    def snapshot():  # the event was open when the snapshot began; the outbox publishes its end meanwhile
        outbox.append(threading.Thread(target=publisher.publish_acked, args=([(topic, b"OFF", True)],)))
        outbox[0].start()  # paho's network thread (running this callback) sends it, and reads its ack, later
        assert handed_to_paho.wait(10)
        return [(topic, b"ON", True), (topics.status("gate-cam"), b"online", True)]

    publisher.client.publish = watched_publish
    publisher.snapshot = snapshot
    publisher.on_connected = lambda: None
    sub = subscribe("race/#")
    publisher.start()
    try:
        sub.wait_for(lambda m: sub.on(topics.status("gate-cam")) == [b"online"])
        late = subscribe("race/#")
        got = late.wait_for(lambda m: {topic, topics.status("gate-cam")} <= {t for t, *_ in m})
        assert {t: p for t, p, r in got if r}[topic] == b"OFF"
        assert sub.on(topic) == [b"OFF"]  # the stale ON was never sent
        outbox[0].join(10)
    finally:
        publisher.stop()


def test_late_subscriber_gets_retained_state_and_valid_discovery(service, subscribe):
    svc = service()
    first = subscribe("campusguard/#")
    crowd_event(svc, 0)
    svc.evaluate("gate-cam", at(2), (W, H), people(2))
    first.wait_for(lambda m: first.on("campusguard/gate-cam/plaza/occupancy")[-1:] == [b"2"]
                   and first.on("campusguard/gate-cam/plaza/crowd/state")[-1:] == [b"OFF"])

    late = subscribe("#")
    got = late.wait_for(lambda m: {"campusguard/gate-cam/status", "campusguard/gate-cam/plaza/occupancy",
                                   "campusguard/availability", "campusguard/gate-cam/plaza/crowd/state"}
                        <= {t for t, *_ in m} and sum(t.startswith("homeassistant/") for t, *_ in m) == 3)
    retained = {t: p for t, p, r in got if r}
    assert retained["campusguard/availability"] == b"online"
    assert retained["campusguard/gate-cam/status"] == b"online"
    assert retained["campusguard/gate-cam/plaza/occupancy"] == b"2"
    assert retained["campusguard/gate-cam/plaza/crowd/state"] == b"OFF"
    assert "campusguard/events" not in retained  # events are history, not state

    configs = {t: json.loads(p) for t, p in retained.items() if t.startswith("homeassistant/")}
    rule = configs["homeassistant/binary_sensor/campusguard/gate-cam_plaza_crowd/config"]
    camera = configs["homeassistant/binary_sensor/campusguard/gate-cam_status/config"]
    for cfg in (rule, camera):
        assert all(cfg.get(k) for k in REQUIRED_HA_KEYS), cfg
        assert cfg["availability"] == [{"topic": "campusguard/availability"}]
        assert cfg["device"]["identifiers"] == ["campusguard_gate-cam"] and cfg["device"]["name"] == "North gate"
    assert rule["state_topic"] == "campusguard/gate-cam/plaza/crowd/state"
    assert (rule["payload_on"], rule["payload_off"]) == ("ON", "OFF")
    assert camera["device_class"] == "connectivity" and camera["state_topic"] == "campusguard/gate-cam/status"
    assert (camera["payload_on"], camera["payload_off"]) == ("online", "offline")
    view = configs["homeassistant/binary_sensor/campusguard/gate-cam_view/config"]  # view checks: on by default
    assert all(view.get(k) for k in REQUIRED_HA_KEYS) and view["device_class"] == "problem"
    assert view["state_topic"] == "campusguard/gate-cam/view/problem" and view["device"] == camera["device"]
    assert len({c["unique_id"] for c in configs.values()}) == 3


def test_broker_restart_mid_stream_loses_no_event(service, subscribe, mosquitto):
    svc = service()
    sub = subscribe("campusguard/events")
    first = crowd_event(svc, 0)
    sub.wait_for(lambda m: len(m) == 2)
    eventually(lambda: svc.store.outbox.depth([svc.mqtt.url]) == 0)  # acked (else re-sent: at least once)

    mosquitto.stop()
    during = []
    for i in range(3):  # raised while the broker is down: they wait in the outbox
        during += crowd_event(svc, 10 + 10 * i)
    assert len(during) == 6
    svc.writer.settle()  # events are written off the frame path
    assert svc.store.outbox.depth([svc.mqtt.url]) == 6
    mosquitto.start()

    expected = {f"{e['id']}:{e['state']}" for e in first + during}
    got = sub.wait_for(lambda m: expected <= {json.loads(p)["idempotency_key"] for _, p, _ in m}, timeout=30)
    keys = [json.loads(p)["idempotency_key"] for _, p, _ in got]
    assert [k for k in keys if k in expected][:2] == [f"{first[0]['id']}:started", f"{first[0]['id']}:ended"]
    order = [k for k in dict.fromkeys(keys)]
    assert order == [f"{e['id']}:{e['state']}" for e in first + during]  # in order, across the outage
    eventually(lambda: svc.store.outbox.depth([svc.mqtt.url]) == 0)
    # the broker lost its retained state with its restart (no persistence): re-published on reconnect
    late = subscribe("campusguard/availability")
    late.wait_for(lambda m: (("campusguard/availability", b"online", True) in m))


@pytest.fixture
def tls_broker(mosquitto):  # after `mosquitto`: skipped or failed the same way when it is missing
    broker = Mosquitto(find_mosquitto(), free_port(), tls_user=("alice", "s3cret")).start()
    yield broker
    broker.close()


def test_tls_and_credentials(tls_broker, tmp_path):
    """mqtts:// checked against the CA file, a user/password in the URL; a wrong password is
    refused by the broker and the row stays in the outbox."""
    sub = Subscriber(tls_broker.port, "campusguard/events", ca_file=tls_broker.ca_file, user=("alice", "s3cret"))
    store = EventStore(f"sqlite:///{tmp_path}/e.db")
    bridges = []
    try:
        for password, event_id in (("s3cret", "good"), ("n0t-her-pa55", "bad")):
            metrics = Metrics()
            settings = Settings(mqtt_url=f"mqtts://alice:{password}@127.0.0.1:{tls_broker.port}",
                                mqtt_ca_file=tls_broker.ca_file, mqtt_client_id=f"cg-{event_id}", webhook_timeout_s=2)
            bridge = MqttBridge.build(mqtt_options(settings), store, metrics)
            assert bridge.url == f"mqtts://127.0.0.1:{tls_broker.port}"
            event = {"id": event_id, "camera_id": "c", "zone": "z", "rule": "intrusion",
                     "started_at": "2026-03-02T12:00:00Z", "objects": []}
            key = f"{event_id}:started"
            store.events.record(event, [(bridge.url, key, dumps({"type": "event.started", "idempotency_key": key,
                                                          "event": event}))])
            bridges.append(bridge)
            bridge.start(lambda: [])
            if password == "s3cret":
                got = sub.wait_for(lambda m: len(m) == 1)
                assert json.loads(got[0][1])["idempotency_key"] == "good:started"
                eventually(lambda: store.outbox.depth([bridge.url]) == 0)
                bridge.stop()
        eventually(lambda: metrics.registry.get_sample_value("campusguard_mqtt_outbox_depth") == 1)
        assert not bridges[-1].publisher.connected  # refused: nothing was claimed, the row waits
        assert store.outbox.depth([bridges[-1].url]) == 1 and len(sub.messages) == 1
    finally:
        bridges[-1].stop()
        sub.close()
        store.close()


def test_camera_health_is_the_retained_status_topic(service, subscribe):
    """Offline (the sweep) and back (the next frame): the status topic follows; the health
    events go to the event topics like any other, without a rule state topic."""
    svc = service()
    now = [1000.0]
    svc.health.monitor.clock = lambda: now[0]
    sub = subscribe("campusguard/#")
    svc.evaluate("gate-cam", at(0), (W, H), [])
    sub.wait_for(lambda m: sub.on("campusguard/gate-cam/status") == [b"online"])
    now[0] += 61  # the site default offline_after_s is 60
    svc.health.check_offline()
    sub.wait_for(lambda m: sub.on("campusguard/gate-cam/status") == [b"online", b"offline"])
    svc.evaluate("gate-cam", at(70), (W, H), [])
    sub.wait_for(lambda m: sub.on("campusguard/gate-cam/status") == [b"online", b"offline", b"online"])
    got = sub.wait_for(lambda m: len(sub.on("campusguard/events")) == 3)
    assert [(e["type"], e["event"]["rule"]) for e in envelopes(sub.on("campusguard/events"))] == [
        ("event.started", "camera_offline"), ("event.ended", "camera_offline"),
        ("event.started", "camera_online")]  # an instant event: started with its end
    assert len(sub.on("campusguard/gate-cam/camera_offline")) == 2
    # no rule state topic for the health events (a rule's own state topic, retained or published
    # late by an earlier test's service on this shared broker, is not what this checks)
    assert not [t for t, *_ in got if t.endswith("/state") and "camera_o" in t]


def test_availability_last_will_and_graceful_offline(service, subscribe):
    """A connection lost without a goodbye: the broker publishes the will (offline); the
    client reconnects and says online again. A clean stop says offline itself."""
    import socket

    svc = service()
    sub = subscribe("campusguard/availability")
    sub.wait_for(lambda m: sub.on("campusguard/availability")[-1:] == [b"online"])
    seen = len(sub.on("campusguard/availability"))
    svc.mqtt.publisher.client.socket().shutdown(socket.SHUT_RDWR)  # as a crashed replica would
    sub.wait_for(lambda m: sub.on("campusguard/availability")[seen:] == [b"offline", b"online"])
    svc.stop()
    sub.wait_for(lambda m: sub.on("campusguard/availability")[-1:] == [b"offline"])


def test_a_view_problem_is_the_cameras_problem_sensor_and_an_event(service, subscribe, dataset):
    """Covered, then back: the camera_view event's start and end on the event topics (with the
    before/after snapshot's URL), the camera's retained view/problem topic ON then OFF, and no
    per-rule state topic for it."""
    site = {"cameras": [{**SITE["cameras"][0], "view_checks": {"learn_s": 10, "interval_s": 1, "persist_s": 3}}]}
    sub = subscribe("campusguard/#")
    svc = service(site=site)
    sub.wait_for(lambda m: any(t == "campusguard/availability" and p == b"online" for t, p, _ in m))
    camera = Camera.on(dataset, 3)
    events = []
    for t in range(0, 32):
        frame = camera.frame(tape if 14 <= t < 22 else None)
        events += svc.evaluate("gate-cam", at(t), (frame.shape[1], frame.shape[0]), [], frame)
    view = [e for e in events if e["rule"] == "camera_view"]
    assert [(e["state"], e["objects"][0]["kind"]) for e in view] == [("started", "covered"), ("ended", "covered")]
    sub.wait_for(lambda m: len(sub.on("campusguard/gate-cam/camera_view")) == 2)
    got = envelopes(sub.on("campusguard/gate-cam/camera_view"))
    assert [g["type"] for g in got] == ["event.started", "event.ended"]
    assert got[0]["event"]["snapshot"] == f"/events/{view[0]['id']}/snapshot"
    assert got[1]["event"]["objects"][0]["reason"] == "healthy"
    sub.wait_for(lambda m: sub.on("campusguard/gate-cam/view/problem")[-1:] == [b"OFF"]
                 and b"ON" in sub.on("campusguard/gate-cam/view/problem"))
    assert sub.on("campusguard/gate-cam/view/problem")[-2:] == [b"ON", b"OFF"]
    assert not [t for t, *_ in sub.messages if t.endswith("/camera_view/state")]


def test_a_view_sensor_per_camera_with_view_checks_under_an_injective_id():
    """The view sensor's id is one more name list (camera, "view") of discovery.py's injective
    ids: it collides with no status or rule sensor (not even zone "view"'s rules, nor camera
    a.b's with a_b's), and a camera whose view checks are off has none."""
    from app.rules.delivery.mqtt.discovery import decode_object_id, discovery_messages
    from app.rules.site.loader import parse_site_config

    square = [[0, 0], [1, 0], [1, 1]]
    config = parse_site_config({"cameras": [
        {"id": "a.b"}, {"id": "a_b"}, {"id": "quiet", "view_checks": {"enabled": False}},
        {"id": "gate-cam", "zones": [{"name": "view", "polygon": square, "rules": [{"type": "intrusion"}]}]},
    ]})
    topics = Topics("campusguard")
    configs = [json.loads(p) for _, p, _ in discovery_messages(topics, config)]
    ids = [c["unique_id"] for c in configs]
    assert len(ids) == len(set(ids)) == 4 + 3 + 1  # a status per camera, a view per camera with checks, one rule
    views = {c["unique_id"]: c for c in configs if c.get("device_class") == "problem"}
    assert {decode_object_id(u.removeprefix("campusguard_")) for u in views} == {
        ("a.b", "view"), ("a_b", "view"), ("gate-cam", "view")}
    gate = views["campusguard_gate-cam_view"]  # plain names keep a readable id
    assert gate["state_topic"] == topics.view_problem("gate-cam") == "campusguard/gate-cam/view/problem"
    assert gate["json_attributes_topic"] == "campusguard/gate-cam/camera_view"
    assert "campusguard_gate-cam_view_intrusion" in ids  # zone "view"'s rule: another entity


def test_a_state_left_unacknowledged_by_a_dropped_connection_never_outlives_the_reconnect(mosquitto, subscribe):
    """paho re-sends a QoS 1 publish that a dropped connection left unacknowledged *after* the
    reconnect's snapshot: a camera's "online" sent as the link died must not stay retained when
    the camera went offline meanwhile (the snapshot's "offline" is what the broker keeps)."""
    from tests.support.tcp_proxy import TcpProxy

    proxy = TcpProxy(mosquitto.port)
    topics = Topics("stale")
    topic = topics.status("gate-cam")
    publisher = MqttPublisher(BrokerTarget.parse(f"mqtt://127.0.0.1:{proxy.port}"), topics,
                              client_id=f"stale-{free_port()}", reconnect_max_s=1)
    publisher.snapshot = lambda: [(topic, b"offline", True)]  # the service's state at every connect
    sub = subscribe("stale/#")
    publisher.start()
    try:
        sub.wait_for(lambda m: sub.on(topic) == [b"offline"])  # the first connect's snapshot
        proxy.hold()  # from now on the broker sees nothing the publisher sends
        publisher.set_state(topic, b"online")  # the camera came back: sent, never acknowledged
        eventually(lambda: proxy.held_bytes > 0)
        proxy.cut()  # the link dies with "online" in paho's queue; the camera goes away again meanwhile
        # reconnected: the snapshot's "offline", then paho's late re-send of "online", then the correction
        eventually(lambda: len(sub.on(topic)) >= 4 and sub.on(topic)[-1] == b"offline", timeout=25)
        assert sub.on(topic)[:4] == [b"offline", b"offline", b"online", b"offline"]
        late = subscribe("stale/#")
        got = late.wait_for(lambda m: topic in {t for t, *_ in m})
        assert [p for t, p, r in got if t == topic and r] == [b"offline"]
    finally:
        publisher.stop()
        proxy.close()


def test_the_ledger_republishes_only_when_the_last_acknowledged_value_is_stale():
    """Acks in broker order: a stale value acknowledged last, with nothing newer in flight, is
    corrected; while a newer value of the topic is in flight, or when the last is wanted, or
    for a publish paho refused, not."""
    from types import SimpleNamespace

    from app.rules.delivery.mqtt.retained import RetainedLedger

    def run(wanted: dict[str, bytes], sends: list[tuple], acks: list[int]) -> list[tuple[str, bytes]]:
        published: list[tuple[str, bytes]] = []
        ledger = RetainedLedger(threading.Lock(), wanted.get, lambda t, p: published.append((t, p)), lambda: True)
        ledger.start()
        for mid, topic, payload, *rc in sends:
            ledger.sent(SimpleNamespace(mid=mid, rc=rc[0] if rc else 0), topic, payload)
        for mid in acks:
            ledger.on_publish(None, None, mid, None, None)
        ledger.stop()  # handles every ack queued before it
        return published

    # the reconnect snapshot's "off", then paho's late re-send of "on": corrected (99: not retained state)
    assert run({"t": b"off"}, [(1, "t", b"off"), (2, "t", b"on")], [1, 99, 2]) == [("t", b"off")]
    # "on" acknowledged while "off" is still in flight, then "off": what is wanted, nothing to do
    assert run({"t": b"off"}, [(3, "t", b"on"), (4, "t", b"off")], [3, 4]) == []
    # a publish paho refused (rc 15, queue full) is never waited for: the older value is corrected
    assert run({"t": b"on"}, [(6, "t", b"on", 15), (7, "t", b"off")], [7]) == [("t", b"on")]
    # a topic the service wants as the broker has it
    assert run({"u": b"x"}, [(5, "u", b"x")], [5]) == []
