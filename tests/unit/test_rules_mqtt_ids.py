"""Home Assistant ids never collide and stay stable (issue 23 finding 11): zone ``x_y`` with rule
``z`` and zone ``x`` with rule ``y_z``, cameras ``a.b`` and ``a_b``, each get a discovery topic
and a ``unique_id`` of their own, the same after a restart, and the configs the old ids left
retained on the broker are cleared (a real Mosquitto)."""

from __future__ import annotations

import json
import re
import time

import paho.mqtt.client as mqtt
import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st
from paho.mqtt.enums import CallbackAPIVersion

from app.config import Settings
from app.core.metrics import Metrics
from app.rules.delivery.mqtt.discovery import decode_object_id, legacy_object_id, object_id
from app.rules.delivery.mqtt.topics import Topics
from app.rules.site.schema import IDENT
from app.wiring import build_rules
from tests.support.mqtt_broker import Subscriber

pytestmark = pytest.mark.timeout(120)
NAME = st.from_regex(IDENT, fullmatch=True)
RULE = {"type": "intrusion", "classes": ["person"]}
SITE = {"cameras": [
    {"id": "a.b"}, {"id": "a_b"}, {"id": "a"},
    {"id": "cam", "zones": [
        {"name": "x_y", "polygon": [[0, 0], [1, 0], [1, 1]], "rules": [{**RULE, "name": "z"}]},
        {"name": "x", "polygon": [[0, 0], [1, 0], [1, 1]], "rules": [{**RULE, "name": "y_z"}]},
        {"name": "plain", "polygon": [[0, 0], [1, 0], [1, 1]], "rules": [{**RULE, "name": "fire_lane"}]}]}]}
# (names) of every entity of SITE the old release announced: each camera's status, each camera/zone/rule
ENTITIES = [("a.b", "status"), ("a_b", "status"), ("a", "status"), ("cam", "status"), ("cam", "x_y", "z"),
            ("cam", "x", "y_z"), ("cam", "plain", "fire_lane")]
# and now: each camera's view sensor too (view checks are on by default)
CURRENT = ENTITIES + [(c["id"], "view") for c in SITE["cameras"]]


@given(st.lists(NAME, min_size=1, max_size=3))
def test_ids_are_injective_ha_safe_and_unchanged_for_plain_names(names):
    oid = object_id(*names)
    assert re.fullmatch(r"[A-Za-z0-9_-]+", oid)
    assert decode_object_id(oid) == tuple(names)  # readable back: no two name lists share an id
    if not any(c in "_.:" for n in names for c in n):
        assert oid == legacy_object_id(*names)  # gate-cam_plaza_crowd stays what it was


def test_the_collisions_of_the_issue_are_gone():
    assert legacy_object_id("cam", "x_y", "z") == legacy_object_id("cam", "x", "y_z")
    assert object_id("cam", "x_y", "z") == "cam_x__y_z" != object_id("cam", "x", "y_z") == "cam_x_y__z"
    assert legacy_object_id("a.b", "status") == legacy_object_id("a_b", "status")
    assert object_id("a.b", "status") == "a_-db_status" != object_id("a_b", "status") == "a__b_status"
    assert object_id("a_b", "status") != object_id("a", "b", "status")
    assert len({object_id(*e) for e in CURRENT}) == len(CURRENT)


def retained_discovery(mosquitto) -> dict[str, dict]:
    """Every retained discovery config on the broker now: a fresh subscriber gets them when it
    subscribes, before any message published later, so once a sentinel published after that
    arrives, all of them have."""
    sub = Subscriber(mosquitto.port, "homeassistant/#")
    pub = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="sentinel")
    pub.connect("127.0.0.1", mosquitto.port)
    pub.loop_start()
    try:
        for _ in range(100):
            pub.publish("homeassistant/sentinel", b"x", qos=1).wait_for_publish(5)
            if sub.on("homeassistant/sentinel"):
                break
            time.sleep(0.1)
        got = sub.wait_for(lambda m: any(t == "homeassistant/sentinel" for t, _, _ in m))
        return {t: json.loads(p) for t, p, retained in got if retained and p}
    finally:
        pub.disconnect()
        pub.loop_stop()
        sub.close()


def test_configs_of_changed_ids_are_cleared_and_the_new_ids_are_stable(tmp_path, mosquitto):
    topics = Topics("campusguard")
    old = mqtt.Client(CallbackAPIVersion.VERSION2, client_id="old-campusguard")
    old.connect("127.0.0.1", mosquitto.port)
    old.loop_start()
    legacy = {topics.discovery(legacy_object_id(*names)) for names in ENTITIES}  # what the old release left
    for topic in legacy:
        old.publish(topic, json.dumps({"unique_id": "old"}).encode(), qos=1, retain=True).wait_for_publish(5)
    old.disconnect()
    old.loop_stop()

    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(SITE))
    settings = Settings(site_config=path, events_db_url=f"sqlite:///{tmp_path}/e.db", snapshot_dir=tmp_path / "s",
                        clips=False, mqtt_url=mosquitto.url)
    seen = []
    for _ in range(2):  # and again after a restart: the same ids
        svc = build_rules(settings, Metrics())
        svc.start()
        try:
            sub = Subscriber(mosquitto.port, "campusguard/availability")
            sub.wait_for(lambda m: m[-1:] and m[-1][1] == b"online")
            sub.close()
            configs = retained_discovery(mosquitto)
        finally:
            svc.stop()
        expected = {topics.discovery(object_id(*names)) for names in CURRENT}
        assert set(configs) == expected, sorted(set(configs) ^ expected)  # no orphan of the old ids is left
        assert len({c["unique_id"] for c in configs.values()}) == len(CURRENT)
        rule = configs[topics.discovery("cam_x__y_z")]
        assert rule["unique_id"] == "campusguard_cam_x__y_z" and rule["state_topic"] == "campusguard/cam/x_y/z/state"
        other = configs[topics.discovery("cam_x_y__z")]
        assert other["state_topic"] == "campusguard/cam/x/y_z/state"
        assert configs[topics.discovery("a_-db_status")]["device"]["identifiers"] == ["campusguard_a_-db"]
        assert configs[topics.discovery("a__b_status")]["device"]["identifiers"] == ["campusguard_a__b"]
        seen.append({t: c["unique_id"] for t, c in configs.items()})
    assert seen[0] == seen[1]
    assert topics.discovery("cam_status") in legacy & set(seen[0])  # an id that did not change was kept, not cleared
