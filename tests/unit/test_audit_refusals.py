"""Repeated refusals fold into one audit record per key, route and window (issue 42, finding 8;
app/core/refusal_digest.py): a viewer key's flood of admin requests leaves a bounded number of
rows whose counts add up to every refusal, a real change stays in the latest ten, every request
is still answered 403 (never throttled), nothing is lost at a clean stop, two processes do not
count a refusal twice, and ``GET /audit?exclude_action=auth.refused`` hides refusals."""

from __future__ import annotations

import datetime as dt
import json
import shutil

import pytest

from app.api.state import state_of
from app.config import Settings
from app.core.audit import AuditEntry, NoAudit
from app.core.metrics import Metrics
from app.core.refusal_digest import ACTION, MAX_CLIENTS, WINDOW_S, LocalWindows, RefusalDigest
from app.core.timeutil import utcnow
from app.wiring.rules import build_rules_stack
from tests.support import audit_app
from tests.support.audit_app import ALICE, CAROL, as_, sha
from tests.support.rules_util import EXAMPLE_SITE

pytestmark = pytest.mark.timeout(180)
env = audit_app.env  # the fixture: the site app with the three keys
ZONE = "/admin/site/cameras/gate-cam/zones/{}"
ROUTE = "DELETE /admin/site/cameras/{camera_id}/zones/{zone_name}"
T0 = dt.datetime(2026, 3, 2, 12, 0, tzinfo=dt.UTC)


class Trail(NoAudit):
    """What reaches the trail behind the digest, kept for the test (with start/stop seen)."""

    def __init__(self) -> None:
        self.entries: list[AuditEntry] = []
        self.stopped = False

    def record(self, entry: AuditEntry) -> None:
        assert not self.stopped, "a record after the trail stopped is lost"
        self.entries.append(entry)

    def stop(self) -> None:
        self.stopped = True


def refusal(actor: str = "viewer", second: float = 0, client: str = "10.0.0.7", route: str = ROUTE,
            reason: str = "insufficient_role") -> AuditEntry:
    return AuditEntry(actor=actor, client=client, action=ACTION, target=f"DELETE /x/{second}", outcome="refused",
                      after=reason, at=T0 + dt.timedelta(seconds=second), route=route)


def total(entries: list[AuditEntry]) -> int:
    """Refusals the records stand for: 1 for a first record, ``count`` for a closing one."""
    return sum(json.loads(e.after)["count"] if (e.after or "").startswith("{") else 1 for e in entries)


def test_a_flood_of_refusals_writes_two_records_and_a_real_change_stays_in_the_latest_ten(env):
    admin, viewer = as_(env, ALICE, "10.0.0.5"), as_(env, CAROL, "10.0.0.7")
    assert admin.post("/admin/cameras/plaza-cam/reset").status_code == 200
    codes = {viewer.delete(ZONE.format(f"z{i}")).status_code for i in range(1000)}  # ids in the path: one route
    assert codes == {403}  # every request refused as before: no 429, a small role is not a failed login

    latest = admin.get("/audit", params={"limit": 10}).json()["items"]
    assert [r["action"] for r in latest] == [ACTION, "camera.reset"], latest  # the first refusal, then the reset
    first = latest[0]
    carol = "key:" + sha(CAROL)[:8]
    assert (first["actor"], first["client"], first["target"], first["after"]) == (
        carol, "10.0.0.7", f"DELETE {ZONE.format('z0')}", "insufficient_role")

    digest = state_of(env.app).gate.audit.get()
    assert isinstance(digest, RefusalDigest)
    digest.clock = lambda: utcnow() + dt.timedelta(seconds=WINDOW_S + 1)  # the window has closed
    items = admin.get("/audit", params={"limit": 10}).json()["items"]
    assert [r["action"] for r in items] == [ACTION, ACTION, "camera.reset"], items
    closing = json.loads(items[0]["after"])
    assert closing["count"] == 999 and closing["reason"] == "insufficient_role" and closing["clients"] == ["10.0.0.7"]
    assert closing["first_at"] <= closing["last_at"] and items[0]["target"] == ROUTE
    assert (items[0]["actor"], items[0]["outcome"]) == (carol, "refused")


def test_exclude_action_hides_refusals_and_a_bad_value_is_a_422(env):
    admin, viewer = as_(env, ALICE, "10.0.0.5"), as_(env, CAROL, "10.0.0.7")
    assert viewer.post("/admin/reload").status_code == 403
    assert admin.post("/admin/cameras/plaza-cam/reset").status_code == 200
    assert viewer.post("/admin/cameras/plaza-cam/reset").status_code == 403
    every = [r["action"] for r in admin.get("/audit").json()["items"]]
    assert every == [ACTION, "camera.reset", ACTION]
    hidden = admin.get("/audit", params={"exclude_action": ACTION}).json()
    assert [r["action"] for r in hidden["items"]] == ["camera.reset"] and hidden["next_cursor"] is None
    both = admin.get("/audit", params={"exclude_action": "camera.reset", "actor": "key:" + sha(CAROL)[:8]}).json()
    assert [r["action"] for r in both["items"]] == [ACTION, ACTION]
    for bad in ("x\x00y", "a" * 33):
        assert admin.get("/audit", params={"exclude_action": bad}).status_code == 422


def test_repeats_fold_per_key_route_and_reason_and_each_window_starts_with_a_record():
    trail = Trail()
    digest = RefusalDigest(trail, clock=lambda: T0)
    for s in range(5):
        digest.record(refusal(second=s, client=f"10.0.0.{s % 2}"))
    digest.record(refusal(actor="other"))  # another key: its own group
    digest.record(refusal(route="POST /admin/reload"))  # another route: its own group
    digest.record(refusal(reason="invalid_key"))  # another reason: its own group
    digest.record(AuditEntry(actor="alice", action="camera.reset", target="cam"))  # not a refusal: as it came
    assert [(e.actor, e.route, e.after) for e in trail.entries] == [
        ("viewer", ROUTE, "insufficient_role"), ("other", ROUTE, "insufficient_role"),
        ("viewer", "POST /admin/reload", "insufficient_role"), ("viewer", ROUTE, "invalid_key"),
        ("alice", None, None)]
    digest.record(refusal(second=WINDOW_S + 1))  # the next window: the closing record, then this one at once
    closing, opening = trail.entries[-2:]
    detail = json.loads(closing.after)
    assert detail == {"reason": "insufficient_role", "count": 4, "first_at": "2026-03-02T12:00:01Z",
                      "last_at": "2026-03-02T12:00:04Z", "clients": ["10.0.0.1", "10.0.0.0"]}
    assert (closing.target, closing.at, closing.outcome) == (ROUTE, T0 + dt.timedelta(seconds=4), "refused")
    assert opening.after == "insufficient_role" and opening.at == T0 + dt.timedelta(seconds=WINDOW_S + 1)
    assert total([e for e in trail.entries if e.actor == "viewer" and e.route == ROUTE
                  and "invalid_key" not in (e.after or "")]) == 6


def test_a_window_closes_on_time_without_another_refusal_and_a_lone_refusal_adds_nothing():
    now = [T0]
    trail = Trail()
    digest = RefusalDigest(trail, clock=lambda: now[0])
    digest.record(refusal(second=0))
    digest.record(refusal(actor="lone", second=0))
    for s in range(1, 4):
        digest.record(refusal(second=s))
    now[0] = T0 + dt.timedelta(seconds=WINDOW_S - 1)
    digest.close_due()
    assert len(trail.entries) == 2  # still open
    now[0] = T0 + dt.timedelta(seconds=WINDOW_S)
    digest.close_due()
    assert len(trail.entries) == 3 and json.loads(trail.entries[-1].after)["count"] == 3  # "lone" wrote no second
    assert len(digest.windows) == 0


def test_nothing_is_lost_at_a_clean_stop():
    trail = Trail()
    digest = RefusalDigest(trail, clock=lambda: T0)
    digest.start()
    for s in range(50):
        digest.record(refusal(second=s / 100))
    digest.stop()
    assert trail.stopped and len(trail.entries) == 2 and total(trail.entries) == 50


def test_the_table_is_bounded_and_a_group_pushed_out_is_written_not_dropped():
    trail = Trail()
    digest = RefusalDigest(trail, LocalWindows(max_open=3), clock=lambda: T0)
    for actor in ("a", "b", "c", "a", "a", "d"):  # d opens a fourth group: a's window closes early
        digest.record(refusal(actor=actor))
    assert [e.actor for e in trail.entries] == ["a", "b", "c", "a", "d"]
    assert json.loads(trail.entries[3].after)["count"] == 2
    assert len(digest.windows) == 3


def test_clients_named_in_a_closing_record_are_bounded():
    trail = Trail()
    digest = RefusalDigest(trail, clock=lambda: T0)
    for i in range(3 * MAX_CLIENTS):
        digest.record(refusal(client=f"10.0.1.{i}"))
    digest.stop()
    detail = json.loads(trail.entries[-1].after)
    assert detail["count"] == 3 * MAX_CLIENTS - 1 and len(detail["clients"]) == MAX_CLIENTS


def test_two_processes_each_fold_their_own_refusals_and_never_count_one_twice():
    """Two processes behind one port (one per GPU) write into one trail: each writes its own first
    and closing record, at most two rows per process, and the counts add up to every refusal."""
    trails = Trail(), Trail()
    one, two = (RefusalDigest(t, clock=lambda: T0) for t in trails)
    for i in range(301):
        (one if i % 3 else two).record(refusal(second=i / 1000))
    one.stop()
    two.stop()
    written = trails[0].entries + trails[1].entries
    assert len(written) == 4 and total(written) == 301


def test_the_servers_trail_folds_refusals_and_a_clean_stop_writes_the_open_windows(tmp_path):
    """The trail as the lifespan builds it (build_rules_stack): 1,000 refusals, then a stop (the
    lifespan's ``stack.audit.stop()``) with the window still open: two rows in the event store,
    and their counts add up to 1,000."""
    site = tmp_path / "site.yaml"
    shutil.copy(EXAMPLE_SITE, site)
    stack = build_rules_stack(Settings(site_config=site, events_db_url=f"sqlite:///{tmp_path}/e.db",
                                       snapshot_dir=tmp_path / "snaps", clips=False), Metrics())
    try:
        stack.audit.start()
        for i in range(1000):
            stack.audit.record(AuditEntry(actor="viewer", client="10.0.0.7", action=ACTION, target=f"DELETE /x/{i}",
                                          outcome="refused", after="insufficient_role", route=ROUTE))
        stack.audit.stop()
        rows, _ = stack.rules.store.audit.page(cursor=None, limit=50)
    finally:
        stack.rules.stop()
    assert [r["target"] for r in rows] == [ROUTE, "DELETE /x/0"]
    assert json.loads(rows[0]["after"])["count"] == 999
