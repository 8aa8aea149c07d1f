"""Event store on SQLite and a real PostgreSQL: insert/update, filters, time range, pagination;
outbox rows written atomically."""

from __future__ import annotations

import datetime as dt

import pytest

from app.rules.store.db import EventStore
from tests.support.rules_util import T0, outbox_rows


def astuple_page(page):
    return page.items, page.total


def event(i: int, camera="cam-a", zone="plaza", rule="crowd", ended=False) -> dict:
    start = T0 + dt.timedelta(minutes=i)
    return {"id": f"ev{i:03d}", "camera_id": camera, "zone": zone, "rule": rule, "rule_type": rule,
            "started_at": start.isoformat(), "ended_at": (start + dt.timedelta(seconds=30)).isoformat() if ended else None,
            "objects": [{"track_id": i, "class_id": 0, "class_name": "person", "confidence": 0.9,
                         "box": [1.0, 2.0, 3.0, 4.0]}], "max_count": i % 7, "snapshot": None}


@pytest.fixture
def store(db_url):
    s = EventStore(db_url)  # SQLite: the folder is created
    for i in range(30):
        s.events.record(event(i, camera="cam-a" if i % 3 else "cam-b", zone="plaza" if i % 2 else "gate",
                       rule="crowd" if i % 5 else "intrusion"))
    yield s
    s.close()


def test_round_trip_and_update_on_end(store):
    got = store.events.get("ev004")
    assert got["camera_id"] == "cam-a" and got["state"] == "started" and got["ended_at"] is None
    assert got["started_at"] == "2026-03-02T12:04:00Z" and got["objects"][0]["box"] == [1.0, 2.0, 3.0, 4.0]
    store.events.record({**event(4, zone="gate"), "ended_at": "2026-03-02T12:05:00Z", "max_count": 9})
    got = store.events.get("ev004")
    assert got["state"] == "ended" and got["ended_at"] == "2026-03-02T12:05:00Z" and got["max_count"] == 9
    assert store.events.get("nope") is None


def test_filters(store):
    items, total = astuple_page(store.events.query(camera_id="cam-b", limit=500))
    assert total == 10 and {e["camera_id"] for e in items} == {"cam-b"}
    items, total = astuple_page(store.events.query(camera_id="cam-a", zone="plaza", rule="crowd", limit=500))
    expected = [i for i in range(30) if i % 3 and i % 2 and i % 5]
    assert total == len(expected) and sorted(int(e["id"][2:]) for e in items) == expected


def test_time_range_is_on_started_at(store):
    since, until = T0 + dt.timedelta(minutes=10), T0 + dt.timedelta(minutes=20)
    items, total = astuple_page(store.events.query(since=since, until=until, limit=500))
    assert total == 10 and sorted(int(e["id"][2:]) for e in items) == list(range(10, 20))
    # other zones than UTC mean the same instant
    berlin = dt.timezone(dt.timedelta(hours=1))
    items2, _ = astuple_page(store.events.query(since=since.astimezone(berlin), until=until.astimezone(berlin), limit=500))
    assert [e["id"] for e in items2] == [e["id"] for e in items]


def test_pagination_newest_first(store):
    pages = [store.events.query(limit=7, offset=o) for o in range(0, 35, 7)]
    ids = [e["id"] for page in pages for e in page.items]
    assert all(page.total == 30 and page.total_exact for page in pages)
    assert ids == [f"ev{i:03d}" for i in range(29, -1, -1)]


def test_keyset_pages_reach_the_end_in_order_with_ties(store):
    """The cursor is (started_at, id) of a page's last event: ties on started_at are ordered
    by id, nothing is skipped or repeated, and the last page says there is no next."""
    same = dt.datetime(2026, 5, 1, 12, 0, 0, tzinfo=dt.timezone.utc)
    for i in range(5):  # five events starting at the same instant
        store.events.record({**event(100 + i), "started_at": same.isoformat()})
    seen, after, pages = [], None, 0
    while True:
        page = store.events.query(limit=4, after=after)
        seen += [e["id"] for e in page.items]
        pages += 1
        if page.next is None:
            break
        after = page.next
    everything = store.events.query(limit=500).items
    assert seen == [e["id"] for e in everything] and len(seen) == len(set(seen)) == 35
    assert pages == 9  # 35 events, 4 a page


def test_counts_are_capped_and_say_so(store, monkeypatch):
    monkeypatch.setattr("app.rules.store.events.COUNT_CAP", 10)
    page = store.events.query(limit=3)
    assert (page.total, page.total_exact) == (10, False)
    page = store.events.query(camera_id="cam-b", zone="gate", limit=3)
    assert page.total_exact and page.total == len(store.events.query(camera_id="cam-b", zone="gate", limit=500).items) == 5


def test_outbox_rows_written_with_the_event_once_per_key(db_url):
    s = EventStore(db_url)
    deliveries = [("http://127.0.0.1:1/a", "ev000:started", b"{}"), ("http://127.0.0.1:1/b", "ev000:started", b"{}")]
    s.events.record(event(0), deliveries)
    s.events.record(event(0), deliveries)  # recorded again (e.g. a retry): no duplicate deliveries
    assert s.outbox.depth() == 2
    assert s.outbox.depth(["http://127.0.0.1:1/a"]) == 1
    lease = dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=10)
    head, due = s.outbox.claim_next("http://127.0.0.1:1/a", lease)
    assert head.idempotency_key == "ev000:started" and head.attempts == 0 and due is None
    assert s.outbox.claim_next("http://127.0.0.1:1/a", lease) == (None, lease)  # leased: due when the lease ends
    s.outbox.delivered(head.id)
    assert s.outbox.depth() == 1 and s.outbox.claim_next("http://127.0.0.1:1/a", lease) == (None, None)


def test_persists_across_reopen(db_url):
    url = db_url
    s = EventStore(url)
    s.events.record(event(1), [("http://127.0.0.1:1/a", "ev001:started", b"{}")])
    s.close()
    s = EventStore(url)
    assert s.events.get("ev001")["id"] == "ev001" and s.outbox.depth() == 1


def _table_rows(s: EventStore) -> tuple[list, list]:
    from sqlalchemy import select

    from app.rules.store.schema import events_table

    with s.engine.connect() as conn:
        events = [tuple(r) for r in conn.execute(select(events_table).order_by(events_table.c.id))]
    return events, sorted((r["event_id"], r["url"], r["idempotency_key"], r["payload"]) for r in outbox_rows(s))


@pytest.mark.parametrize("seed", range(3))
def test_a_batch_stores_what_its_writes_one_by_one_store(db_url, seed, request):
    """The event writer's batches (``record_many``: one lookup, writes folded per event,
    executemany) leave the tables as the same writes recorded one at a time: events started
    and ended in one batch, updated twice, a late "started" write after the end (never
    reopens), events already stored, and deliveries repeated within and across batches."""
    import random

    rng = random.Random(seed)
    other = db_url.replace("events.db", "events-single.db") if db_url.startswith("sqlite") else \
        request.getfixturevalue("postgres").new_database()
    batched, single = EventStore(db_url), EventStore(other)
    try:
        for s in (batched, single):
            for i in range(0, 40, 4):  # already in the store, some ended
                s.events.record(event(i, ended=i % 8 == 0))
        writes = []
        for _ in range(120):
            i = rng.randrange(40)
            ev = event(i, ended=rng.random() < 0.5)
            ev["max_count"] = rng.randrange(9)
            ev["objects"] = [{"track_id": rng.randrange(5)}]
            keys = [(f"http://127.0.0.1:1/{rng.choice('ab')}", f"ev{i:03d}:{rng.choice(['started', 'ended'])}",
                     b'{"n": %d}' % i) for _ in range(rng.randrange(3))]
            writes.append((ev, keys))
        batched.events.record_many(writes)
        for ev, keys in writes:
            single.events.record(ev, keys)
        got, expected = _table_rows(batched), _table_rows(single)
        assert got == expected
        stored = {e["id"]: e for e in batched.events.query(limit=500).items}
        ever_ended = {f"ev{i:03d}" for i in range(0, 40, 8)} | {ev["id"] for ev, _ in writes if ev["ended_at"]}
        assert {k for k, e in stored.items() if e["state"] == "ended"} == ever_ended  # an end is never undone
        last = {ev["id"]: ev for ev, _ in writes}
        assert all(stored[k]["max_count"] == ev["max_count"] for k, ev in last.items())  # the last write wins
        assert {e["state"] for e in stored.values()} == {"started", "ended"}
        assert len(got[1]) > 10
    finally:
        batched.close()
        single.close()


def test_the_writers_lookups_use_indexes(tmp_path):
    """Every SELECT a batch of writes runs (the events' lookup, the deliveries' duplicate
    check) is answered from an index, never by scanning a table that grows to millions of
    rows (SQLite's query plan of each statement as executed)."""
    from sqlalchemy import event as sa_event

    s = EventStore(f"sqlite:///{tmp_path}/events.db")
    try:
        statements: list[tuple[str, tuple]] = []
        sa_event.listen(s.engine, "before_cursor_execute",
                        lambda conn, cursor, sql, params, context, many: statements.append((sql, params))
                        if sql.lstrip().upper().startswith("SELECT") else None)
        s.events.record_many([(event(i, ended=i % 2 == 0), [(f"http://127.0.0.1:1/{u}", f"ev{i:03d}:started", b"{}")
                                                             for u in "ab"]) for i in range(6)])
        assert len(statements) >= 3
        with s.engine.connect() as conn:
            for sql, params in statements:
                plan = " | ".join(str(r[-1]) for r in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + sql, params))
                assert "USING" in plan and "SCAN" not in plan, f"{sql}: {plan}"
    finally:
        s.close()
