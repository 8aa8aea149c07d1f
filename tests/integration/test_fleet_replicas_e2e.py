"""Two real replicas on one PostgreSQL behind the shipped nginx config: one fleet view.

A camera's frames (through nginx, hashed on camera_id) reach one replica and open a crowd
event there. Within 5 s every camera route and the console's routes answer the same state of
the camera from either replica, asked directly and through nginx: GET /cameras,
/cameras/{id}, /cameras/{id}/counts, /cameras/{id}/frame.jpg, /camera-summary and /status
(which replica answered, and the fleet: both replicas, the camera on its owner). The event's
end reaches both the same way; the owner killed, the other shows its camera as stale.
"""

from __future__ import annotations

import datetime as dt
import signal
import time

import httpx

from tests.deploy.nginx_util import REPLICAS, running_edge
from tests.support.rules_e2e import CAMERA, detect, pick_frames, site_copy
from tests.support.wait import wait_for

BOUND_S = 5.0  # the documented staleness bound (docs/deploy.md, Shared fleet state)
SAME = ("status", "last_frame_at", "reported_by", "stale")


def views(client: httpx.Client) -> dict:
    """What one client is told about CAMERA by every camera route and the console's routes."""
    one = client.get(f"/cameras/{CAMERA}").json()
    listed = next(c for c in client.get("/cameras").json() if c["id"] == CAMERA)
    tile = next(c for c in client.get("/camera-summary", params={"q": CAMERA}).json()["items"] if c["id"] == CAMERA)
    counts = client.get(f"/cameras/{CAMERA}/counts").json()
    status = client.get("/status").json()
    frame = client.get(f"/cameras/{CAMERA}/frame.jpg")
    owners = {r["id"] for r in status["fleet"]["replicas"] if CAMERA in r["cameras"]}
    return {"camera": {k: one[k] for k in SAME}, "listed": {k: listed[k] for k in SAME},
            "tile": {k: tile[k] for k in SAME}, "open": sorted(e["id"] for e in one["open_events"]),
            "listed_open": sorted(e["id"] for e in listed["open_events"]), "tile_open": tile["open_events"],
            "counts": counts["counts"], "owners": sorted(owners),
            "replicas": sorted(r["id"] for r in status["fleet"]["replicas"]),
            "frame": frame.status_code == 200 and frame.content[:2] == b"\xff\xd8"}


def agree(clients: list[httpx.Client], want, timeout: float = BOUND_S) -> dict:
    """The view every client gives, once they all give the same one and ``want`` holds of it
    (within ``timeout`` seconds; else every client's view, in the assertion's message)."""
    deadline = time.monotonic() + timeout
    while True:
        seen = [views(c) for c in clients]
        if all(v == seen[0] for v in seen) and want(seen[0]):
            return seen[0]
        assert time.monotonic() < deadline, seen
        time.sleep(0.2)


def test_two_replicas_show_one_fleet_behind_nginx(server_factory, tmp_path, dataset, pg_url):
    site = site_copy(tmp_path)
    names = ["replica-a", "replica-b"]
    replicas = [server_factory(wait=False, site_config=site, events_db_url=pg_url, replica_id=name,
                               snapshot_dir=tmp_path / f"snaps-{name}", fleet_stale_after_s=3) for name in names]
    for r in replicas:
        r.wait_ready()
    # the shipped config's eight upstream slots, alternating between the two replicas
    ports = [int(replicas[i % 2].url.rsplit(":", 1)[1]) for i in range(REPLICAS)]
    (tmp_path / "edge").mkdir()
    with running_edge(tmp_path / "edge", ports) as edge:
        clients = [r.client() for r in replicas] + [httpx.Client(base_url=edge.internal, timeout=60)]
        t0 = dt.datetime.now(dt.timezone.utc).replace(microsecond=0) - dt.timedelta(minutes=5)
        crowd, empty = pick_frames(clients[2], dataset)
        started = [e for sec in range(0, 13, 2)
                   for e in detect(clients[2], crowd, t0 + dt.timedelta(seconds=sec)).json()["events"]]
        assert [e["state"] for e in started] == ["started"]
        sent = time.monotonic()
        v = agree(clients, lambda v: v["open"] == [started[0]["id"]])
        print(f"\none fleet view {time.monotonic() - sent:.2f} s after the last frame's reply")
        owner = v["camera"]["reported_by"]
        assert owner in names and v["owners"] == [owner] and v["replicas"] == names
        assert v["camera"] == v["listed"] == v["tile"] == {"status": "online", "last_frame_at": v["camera"]["last_frame_at"],
                                                           "reported_by": owner, "stale": False}
        assert v["camera"]["last_frame_at"].startswith((t0 + dt.timedelta(seconds=12)).strftime("%Y-%m-%dT%H:%M:%S"))
        assert v["listed_open"] == v["open"] and v["tile_open"] == 1 and v["counts"] == [] and v["frame"]
        for c, name in zip(clients, names):
            assert c.get("/status").json()["replica"] == name  # which replica answered

        for sec in (14, 15, 16, 18):  # the crowd leaves: the event ends on the owner, and everywhere
            ended = detect(clients[2], empty, t0 + dt.timedelta(seconds=sec)).json()["events"]
            assert all(e["state"] == "ended" for e in ended)
        agree(clients, lambda v: v["open"] == [] and v["tile_open"] == 0)

        victim = next(r for r, name in zip(replicas, names) if name == owner)
        other = next(c for c, name in zip(clients, names) if name != owner)
        victim.stop(signal.SIGKILL)  # the owner dies: the other replica must not vouch for its camera
        assert wait_for(lambda: other.get(f"/cameras/{CAMERA}").json()["stale"] is True, timeout=15)
        fleet = {r["id"]: r for r in other.get("/status").json()["fleet"]["replicas"]}
        assert fleet[owner]["stale"] is True and fleet[owner]["cameras"] == [CAMERA]
