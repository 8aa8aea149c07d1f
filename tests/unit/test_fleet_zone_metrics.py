"""campusguard_zone_objects across replicas: each replica exports only the cameras it owns
(receives frames of), so a sum over replicas is the fleet's value; a camera that moves away or
goes offline takes its series with it (no frozen last count on the replica it left)."""

from __future__ import annotations

import time

import numpy as np
import pytest
import yaml

from app.config import Settings
from app.core.metrics import Metrics
from app.wiring import build_rules
from tests.support.rules_util import H, W, at, det

CAM = "lane"
SITE = {"cameras": [{"id": CAM, "offline_after_s": 30, "zones": [
    {"name": "gate", "polygon": [[0, 0], [1, 0], [1, 1], [0, 1]],
     "rules": [{"type": "intrusion", "name": "no-entry", "classes": ["person"]}]}]}]}


REGISTRIES: dict[int, Metrics] = {}  # each replica's Metrics, by id() of its service


@pytest.fixture
def pair(tmp_path):
    (tmp_path / "site.yaml").write_text(yaml.safe_dump(SITE))
    made = []
    for name in ("r1", "r2"):
        svc = build_rules(Settings(_env_file=None, site_config=tmp_path / "site.yaml", clips=False,
                                   events_db_url=f"sqlite:///{tmp_path}/shared.db", snapshot_dir=tmp_path / name,
                                   replica_id=name), metrics := Metrics())
        svc.fleet.rows.read_ttl_s = 0
        REGISTRIES[id(svc)] = metrics
        made.append(svc)
    yield made
    for svc in made:
        svc.stop()


def people_in(svc, n: int, t0: float) -> None:
    frame = np.full((H // 4, W // 4, 3), 120, np.uint8)
    for i in range(3):
        svc.evaluate(CAM, at(t0 + i), (W, H), [det("person", 0.2 + 0.2 * k, 0.6) for k in range(n)], frame)


def zone(svc) -> float | None:
    return REGISTRIES[id(svc)].registry.get_sample_value("campusguard_zone_objects", {"camera_id": CAM, "zone": "gate"})


def test_only_the_owner_exports_a_cameras_zone_objects(pair):
    r1, r2 = pair
    assert zone(r1) is None and zone(r2) is None  # nobody owns it yet
    people_in(r1, 2, 0)
    r1.fleet.writer.tick()
    assert (zone(r1), zone(r2)) == (2, None)
    r1.reload()  # an unchanged site file keeps the state, and the series
    assert zone(r1) == 2
    # a rebalance: the camera's frames reach r2; r1's sweep hands it over
    people_in(r2, 3, 20)
    r2.fleet.writer.tick()
    r1.health.monitor.clock = lambda: time.monotonic() + 60
    r1.health.check_offline()
    assert (zone(r1), zone(r2)) == (None, 3)  # the sum over replicas is 3, not 2 + 3
    # r2 loses the camera's stream: offline, and no series is left claiming 3 people
    r2.health.monitor.clock = lambda: time.monotonic() + 60
    r2.health.check_offline()
    assert zone(r2) is None
    people_in(r2, 1, 200)  # back: exported again
    assert zone(r2) == 1
