"""A camera stream's availability on MQTT and in Home Assistant (issue #24, "Visible state"),
against a real Mosquitto: wired as the service wires it (a replica with ingest off that gets
a gateway's reports), the retained ``<prefix>/<camera>/source`` topic follows the stream's
state, a dead gateway's stream goes ``unknown``, a withdrawn one is cleared, a late subscriber
gets it retained, and discovery announces a connectivity sensor per camera with a source.
"""

from __future__ import annotations

import json

import pytest
import yaml

from app.config import Settings
from app.core.metrics import Metrics
from app.core.sources import SourceBook
from app.flow.models import ModelRouter
from app.inference.modelset import ModelSet
from app.wiring import build_ingest, build_rules_stack
from tests.support.mqtt_broker import Subscriber

pytestmark = pytest.mark.mqtt
SITE = {"cameras": [{"id": "gate.cam", "name": "North gate", "source": {"url": "rtsp://${GATE_PW_UNSET}@10.0.0.5/x"}},
                    {"id": "plaza-cam"}]}
TOPIC = "campusguard/gate.cam/source"
CONFIG = "homeassistant/binary_sensor/campusguard/gate_-dcam_stream/config"


class Clock:
    now = 100.0

    def __call__(self) -> float:
        return self.now


def report(name: str) -> dict:
    return {"source": "rtsp://***@10.0.0.5/x", "state": name, "dropped": {}}


def test_stream_state_is_retained_and_announced(tmp_path, mosquitto):
    path = tmp_path / "site.yaml"
    path.write_text(yaml.safe_dump(SITE))
    s = Settings(_env_file=None, site_config=path, ingest="off", events_db_url=f"sqlite:///{tmp_path}/e.db",
                 snapshot_dir=tmp_path / "s", clips=False, mqtt_url=mosquitto.url)
    metrics, clock = Metrics(), Clock()
    book = SourceBook(clock)
    stack = build_rules_stack(s, metrics, book)  # ${GATE_PW_UNSET} is not needed: this replica pulls nothing
    rules = stack.rules
    assert not build_ingest(s, stack, metrics, book, ModelRouter(ModelSet.single("default"))).enabled
    sub = Subscriber(mosquitto.port, "#")
    rules.start()
    try:
        sub.wait_for(lambda m: any(t == CONFIG for t, *_ in m))
        book.report("gate.cam", "gw-0", 30, report("connecting"))
        book.report("gate.cam", "gw-0", 30, report("streaming"))
        sub.wait_for(lambda m: sub.on(TOPIC) == [b"connecting", b"streaming"])
        clock.now += 31  # the gateway died: no report within its ttl
        book.sweep()
        sub.wait_for(lambda m: sub.on(TOPIC)[-1:] == [b"unknown"])
        book.report("gate.cam", "gw-0", 30, report("streaming"))
        sub.wait_for(lambda m: sub.on(TOPIC)[-1:] == [b"streaming"])

        late = Subscriber(mosquitto.port, "campusguard/#")
        try:
            got = late.wait_for(lambda m: TOPIC in {t for t, *_ in m})
            assert [(p, r) for t, p, r in got if t == TOPIC] == [(b"streaming", True)]
        finally:
            late.close()

        config = json.loads([p for t, p, _ in sub.messages if t == CONFIG][-1])
        assert config["device_class"] == "connectivity" and config["state_topic"] == TOPIC
        assert config["value_template"] == "{{ 'ON' if value == 'streaming' else 'OFF' }}"
        assert config["device"]["identifiers"] == ["campusguard_gate_-dcam"]  # the camera's device
        assert config["unique_id"] == "campusguard_gate_-dcam_stream"
        assert not [t for t, *_ in sub.messages if t.endswith("plaza-cam_stream/config")]  # no source, no sensor

        book.withdraw("gate.cam")
        sub.wait_for(lambda m: sub.on(TOPIC)[-1:] == [b""])  # the retained state is cleared
    finally:
        sub.close()
        rules.stop()
