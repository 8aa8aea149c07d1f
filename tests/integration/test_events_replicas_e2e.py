"""Two real replicas on one PostgreSQL behind the shipped nginx config, the real model and frames.

A camera's frames (through nginx, consistent hash on camera_id) start and end a crowd event on
one replica; GET /events on either replica returns it; the webhook receiver gets each delivery
once; the replica caught in the middle of a delivery is killed (SIGKILL) and the other one
delivers it after the lease expires: nothing lost, nothing duplicated for a receiver that
de-duplicates on the Idempotency-Key (the killed replica's request may have arrived).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import signal
import threading
import time

import httpx
import psutil

from tests.deploy.nginx_util import REPLICAS, running_edge
from tests.support.net import free_port
from tests.support.rules_e2e import CAMERA, drive_crowd, pick_frames, site_copy
from tests.support.rules_util import Receiver
from tests.support.wait import wait_for


def holder(servers, port: int):
    """The replica whose process has a connection open to the receiver's port."""
    for server in servers:
        for conn in psutil.Process(server.proc.pid).net_connections(kind="tcp"):
            if conn.raddr and conn.raddr.port == port:
                return server
    return None


def test_two_replicas_one_database_behind_nginx(server_factory, tmp_path, dataset, pg_url):
    hold = threading.Event()
    rx = Receiver(hold_first=hold)
    site = site_copy(tmp_path)
    common = dict(site_config=site, events_db_url=pg_url, snapshot_dir=tmp_path / "snaps", webhook_urls=rx.url,
                  webhook_secret="replicas-webhook-secret",
                  webhook_timeout_s=10, webhook_max_backoff_s=1)  # 10 s: the held delivery outlives a loaded machine's frames
    replicas = [server_factory(wait=False, **common) for _ in range(2)]
    edge, killed, frames_done = contextlib.ExitStack(), [], threading.Event()

    def kill_the_deliverer() -> None:
        """Once the camera's frames are through and the first delivery is held (the replica
        waits up to its 10 s webhook timeout), SIGKILL the replica making it: mid-delivery."""
        if frames_done.wait(120) and wait_for(lambda: len(rx.requests) >= 1, timeout=20):
            victim = holder(replicas, rx.port)
            if victim is not None:
                victim.stop(signal.SIGKILL)
                killed.append(victim)
        hold.set()

    killer = threading.Thread(target=kill_the_deliverer, daemon=True)
    killer.start()
    try:
        for r in replicas:
            r.wait_ready()
        # the shipped config's eight upstream slots, alternating between the two replicas
        ports = [int(replicas[i % 2].url.rsplit(":", 1)[1]) for i in range(REPLICAS)]
        lb = edge.enter_context(running_edge(tmp_path / "lb", ports)).internal  # the compose network's port
        t0 = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) - dt.timedelta(minutes=5)
        with httpx.Client(base_url=lb, timeout=60) as c:
            crowd, empty = pick_frames(c, dataset)
            seen = [e for _, e in drive_crowd(c, crowd, empty, t0)]
        assert [e["state"] for e in seen] == ["started", "ended"]
        event_id = seen[0]["id"]
        for r in replicas:  # either replica answers from the shared store
            with r.client() as c:
                listed = c.get("/events", params={"camera_id": CAMERA}).json()
                assert listed["total"] == 1 and listed["items"][0]["id"] == event_id
                assert listed["items"][0]["state"] == "ended"
        frames_done.set()  # the frames are through: the delivery held since the start can be cut

        killer.join(60)
        assert len(killed) == 1, "the replica holding the first delivery was not found"
        survivor = next(r for r in replicas if r is not killed[0])
        assert wait_for(lambda: len(set(rx.keys())) == 2, timeout=90), rx.keys()  # after the 35 s lease (3 x 10 s + 5 s)
        time.sleep(1.5)
        keys = rx.keys()
        assert list(rx.unique_events()) == [f"{event_id}:started", f"{event_id}:ended"]
        assert keys.count(f"{event_id}:ended") == 1 and keys.count(f"{event_id}:started") <= 2
        with survivor.client() as c:
            assert c.get(f"/events/{event_id}").json()["state"] == "ended"
            assert c.get("/health/ready").json()["event_store"] == "ok"
    finally:
        frames_done.set()
        hold.set()
        edge.close()
        rx.close()
