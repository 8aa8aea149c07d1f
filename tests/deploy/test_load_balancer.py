"""The shipped nginx load balancer, run for real in front of stand-in replicas.

deploy/nginx/nginx.conf is started with the system's nginx (Debian's nginx-light) as
tests/deploy/nginx_util.py renders it: the replica names become loopback ports of small HTTP
servers standing in for the detectors (they let every edge check pass: the real check is
tests/deploy/test_edge.py). Everything else — the map, consistent hash, retry policy, body
buffering — runs as shipped:
a camera's requests stick to one replica, requests without a camera spread, and a replica
answering 503 is retried on the next one with the POST body re-sent.
"""

from __future__ import annotations

import re
from collections import Counter

import httpx
import pytest

from tests.deploy.conftest import NGINX_CONF
from tests.deploy.nginx_util import REPLICAS, running_edge
from tests.support.load_balancer import KEYED, Replica, post


@pytest.fixture(scope="module")
def lb(tmp_path_factory):
    replicas = [Replica(i) for i in range(REPLICAS)]
    try:
        with running_edge(tmp_path_factory.mktemp("nginx"), [r.port for r in replicas]) as edge:
            yield edge.internal, replicas
    finally:
        for r in replicas:
            r.server.shutdown()


def reset(replicas) -> None:
    for r in replicas:
        r.status, r.hits = 200, 0


def test_camera_sticks_to_one_replica_and_cameras_spread(lb):
    url, replicas = lb
    reset(replicas)
    owner = {}
    with httpx.Client(base_url=url, timeout=10, headers=KEYED) as client:
        for round_ in range(3):
            for cam in range(32):
                r = post(client, f"cam-{cam}")
                assert r.status_code == 200
                assert r.json()["camera_id"] == f"cam-{cam}"
                assert owner.setdefault(cam, r.json()["replica"]) == r.json()["replica"], f"cam-{cam} moved"
    assert len(set(owner.values())) >= 5, f"32 cameras on only {sorted(set(owner.values()))}"


def test_a_cameras_own_routes_reach_the_replica_of_its_frames(lb):
    """Latest frame, health, line counts, reset and zone edits of a camera are answered by the
    replica whose memory holds that camera's state: the one its frames are hashed to."""
    url, replicas = lb
    reset(replicas)
    with httpx.Client(base_url=url, timeout=10, headers=KEYED) as client:
        for cam in (f"cam-{i}" for i in range(12)):
            owner = post(client, cam).json()["replica"]
            for method, path in (("GET", f"/cameras/{cam}"), ("GET", f"/cameras/{cam}/frame.jpg"),
                                 ("GET", f"/cameras/{cam}/counts?since=2026-12-01T00:00:00Z"),
                                 ("POST", f"/admin/cameras/{cam}/reset"),
                                 ("POST", f"/admin/site/cameras/{cam}/zones/door")):
                for _ in range(3):
                    assert client.request(method, path).json()["replica"] == owner, (cam, method, path)
        # the camera list and other routes without a camera still spread
        seen = Counter(client.get("/cameras").json()["replica"] for _ in range(48))
        assert len(seen) >= 4, seen


def test_requests_without_camera_spread(lb):
    url, replicas = lb
    reset(replicas)
    with httpx.Client(base_url=url, timeout=10, headers=KEYED) as client:
        seen = Counter(post(client, None).json()["replica"] for _ in range(64))
    assert len(seen) >= 5 and max(seen.values()) < 32, seen


def test_503_is_retried_on_another_replica_with_the_body(lb):
    url, replicas = lb
    reset(replicas)
    body = bytes(range(256)) * 800  # 200 KiB: buffered and re-sent on the retry
    with httpx.Client(base_url=url, timeout=10, headers=KEYED) as client:
        home = post(client, "cam-busy").json()["replica"]
        replicas[home].status = 503
        replicas[home].hits = 0
        r = post(client, "cam-busy", body)
        assert r.status_code == 200, r.text
        assert r.json()["replica"] != home and r.json()["body_len"] == len(body)
        assert replicas[home].hits >= 1, "the camera's replica was tried first"
        # every replica full: the client gets the 503, after proxy_next_upstream_tries attempts
        reset(replicas)
        for rep in replicas:
            rep.status = 503
        r = post(client, "cam-busy")
        assert r.status_code == 503
        tries = int(re.search(r"proxy_next_upstream_tries\s+(\d+);", NGINX_CONF.read_text()).group(1))
        assert sum(rep.hits for rep in replicas) == tries
    reset(replicas)
