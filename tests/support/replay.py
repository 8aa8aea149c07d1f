"""A recorded site and replay recording shared by the replay and dry-run tests."""

from __future__ import annotations

import yaml

from app.config import Settings
from app.rules.service.facade import RulesService
from app.wiring import build_rules
from tests.support.rules_util import H, W, at, det, people

FULL = [[0, 0], [1, 0], [1, 1], [0, 1]]


CROWD = {"type": "crowd", "min_count": 3, "min_duration_s": 5, "clear_after_s": 3, "cooldown_s": 10}


SITE = {"cameras": [
    {"id": "plaza", "zones": [{"name": "plaza", "polygon": FULL, "rules": [CROWD]}]},
    {"id": "gate", "zones": [{"name": "gate", "polygon": FULL, "rules": [
        {"type": "intrusion", "clear_after_s": 3, "cooldown_s": 5}]}]},
]}


# plaza: 4 people for 20 s, 2 for 10 s, 3 for 20 s, then nobody for 10 s (one frame a second).
# crowd (>= 3 for 5 s, cleared after 3 s) starts at 5 and 35 and ends at 20 and 50.
PLAZA = [4] * 20 + [2] * 10 + [3] * 20 + [0] * 10


# gate: a dog in view for 30 s, a person from 10 to 14 s; intrusion (people) from 10 to 15.
GATE = [[det("dog", 0.8, 0.9, w=0.1, h=0.08)] + ([det("person", 0.5, 0.8)] if 10 <= t < 15 else [])
        for t in range(30)] + [[] for _ in range(10)]


def write_site(path, site) -> None:
    path.write_text(yaml.safe_dump(site))


def record(tmp, db_url: str | None = None) -> tuple[RulesService, Settings]:
    """The scenario through a real RulesService with the detection log on (log flushed)."""
    site = tmp / "site.yaml"
    write_site(site, SITE)
    settings = Settings(site_config=site, events_db_url=db_url or f"sqlite:///{tmp}/events.db", snapshot_dir=tmp / "snaps",
                        detection_log=True, clips=False)
    svc = build_rules(settings)
    for t, n in enumerate(PLAZA):
        svc.evaluate("plaza", at(t), (W, H), people(n))
    for t, dets in enumerate(GATE):
        svc.evaluate("gate", at(t), (W, H), dets)
    svc.frame_log.flush()
    svc.writer.settle()  # events are written off the frame path
    return svc, settings
