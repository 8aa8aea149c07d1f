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

import json
import re
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import httpx
import pytest

from tests.deploy.conftest import NGINX_CONF
from tests.deploy.nginx_util import REPLICAS, running_edge


class Replica:
    """A stand-in detector: answers JSON naming itself, or 503 when told to; lets every edge
    check (GET /auth/check) pass without counting it."""

    def __init__(self, index: int, host: str = "127.0.0.1", port: int = 0) -> None:
        self.index = index
        self.status = 200
        self.hits = 0
        replica = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _answer(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                if self.path.startswith("/auth/check"):
                    self.send_response(204)
                    self.end_headers()
                    return
                replica.hits += 1
                query = parse_qs(urlparse(self.path).query)
                payload = json.dumps({"replica": replica.index, "body_len": len(body),
                                      "camera_id": query.get("camera_id", [None])[0]}).encode()
                self.send_response(replica.status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            do_GET = do_POST = _answer

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer((host, port), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture(scope="module")
def lb(tmp_path_factory):
    replicas = [Replica(i) for i in range(REPLICAS)]
    try:
        with running_edge(tmp_path_factory.mktemp("nginx"), [r.port for r in replicas]) as edge:
            yield edge.internal, replicas
    finally:
        for r in replicas:
            r.server.shutdown()


# Clients send a key, as every camera gateway does: the keyed zone's budget (the stand-ins let
# any key pass), not the anonymous one's, which these bursts would exceed.
KEYED = {"X-API-Key": "stand-in-key"}


def reset(replicas) -> None:
    for r in replicas:
        r.status, r.hits = 200, 0


def post(client: httpx.Client, camera: str | None, body: bytes = b"jpeg") -> httpx.Response:
    params = {"camera_id": camera} if camera else {}
    return client.post("/detect", params=params, content=body, headers={"content-type": "image/jpeg"})


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
