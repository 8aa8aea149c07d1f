"""Several replicas draining one outbox: each delivery exactly once, in order per URL, and a
replica killed mid-delivery loses nothing (its lease expires and another replica retries)."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

from app.rules.store.db import EventStore
from tests.conftest import REPO
from tests.support.rules_util import Receiver
from tests.support.wait import wait_for
from tests.support.webhooks import enqueue, worker

DELIVERER = """
import sys, time
from app.core.metrics import Metrics
from app.rules.store.db import EventStore
from app.rules.delivery.webhooks import WebhookOptions, WebhookWorker
store = EventStore(sys.argv[1])
w = WebhookWorker(store, WebhookOptions((sys.argv[2],), b"s3cret", timeout_s=30.0, max_backoff_s=0.3),
                  metrics=Metrics(), poll_s=0.05, lease_s=float(sys.argv[3]))
w.start()
print("started", flush=True)
time.sleep(120)
"""


def deliverer(db_url: str, url: str, lease_s: float = 30.0) -> subprocess.Popen:
    """A replica's outbox worker in its own process (own connection pool, own threads)."""
    proc = subprocess.Popen([sys.executable, "-c", DELIVERER, db_url, url, str(lease_s)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "started", proc.stderr.read()
    return proc


def expected_keys(n: int) -> list[str]:
    return [f"ev{i:03d}:{state}" for i in range(n) for state in ("started", "ended")]


def test_two_replica_processes_deliver_each_row_exactly_once_in_order(pg_url):
    rx = Receiver()
    store = EventStore(pg_url)
    procs = [deliverer(pg_url, rx.url) for _ in range(2)]
    try:
        for i in range(40):  # rows arrive while both replicas poll for them
            enqueue(store, rx.url, f"ev{i:03d}", "started")
            enqueue(store, rx.url, f"ev{i:03d}", "ended")
        assert wait_for(lambda: len(rx.requests) >= 80, timeout=60), len(rx.requests)
        time.sleep(0.5)  # no late duplicates
        assert rx.keys() == expected_keys(40)
        assert store.outbox.depth() == 0
    finally:
        for p in procs:
            p.kill()
            p.wait()
        store.close()
        rx.close()


def test_two_workers_on_one_database(db_url):
    """Same guarantee in-process, on SQLite and PostgreSQL (each worker its own engine)."""
    rx = Receiver()
    stores = [EventStore(db_url) for _ in range(2)]
    workers = [worker(s, rx.url, poll_s=0.05) for s in stores]
    try:
        for i in range(15):
            enqueue(stores[i % 2], rx.url, f"ev{i:03d}", "started")
            enqueue(stores[(i + 1) % 2], rx.url, f"ev{i:03d}", "ended")
            for w in workers:
                w.notify()
        assert wait_for(lambda: len(rx.requests) >= 30, timeout=30)
        time.sleep(0.3)
        assert rx.keys() == expected_keys(15)
    finally:
        for w in workers:
            w.stop()
        for s in stores:
            s.close()
        rx.close()


def test_replica_killed_mid_delivery_loses_nothing(pg_url):
    hold = threading.Event()
    rx = Receiver(hold_first=hold)
    store = EventStore(pg_url)
    for i in range(3):
        enqueue(store, rx.url, f"ev{i:03d}", "started")
        enqueue(store, rx.url, f"ev{i:03d}", "ended")
    victim = deliverer(pg_url, rx.url, lease_s=1.5)
    survivor = None
    try:
        assert wait_for(lambda: len(rx.requests) == 1)  # the victim is inside its first POST
        survivor = worker(EventStore(pg_url), rx.url, lease_s=1.5, poll_s=0.1)
        time.sleep(0.3)
        assert len(rx.requests) == 1  # the survivor does not steal a live lease
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        hold.set()
        assert wait_for(lambda: len(rx.requests) >= 7, timeout=20)
        time.sleep(0.3)
        keys = rx.keys()
        # the row the victim was delivering is retried once with the same key (a de-duplicating
        # receiver keeps one); every other row exactly once, all in order
        assert keys == ["ev000:started", *expected_keys(3)]
        assert list(rx.unique_events()) == expected_keys(3)
        assert store.outbox.depth() == 0
    finally:
        if victim.poll() is None:
            victim.kill()
        hold.set()
        if survivor is not None:
            survivor.stop()
            survivor.store.close()
        store.close()
        rx.close()
