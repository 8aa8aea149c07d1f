"""The shipped nginx in front of a real `campusguard serve`: it refuses before it reads.

One real service (keys from deploy/scripts/init-secrets.sh) behind deploy/nginx/nginx.conf as
tests/deploy/nginx_util.py renders it (every replica line points at that one service). What is
proved here, each with the outcome a client sees:
- a 19 MB upload without a key is answered 401 with the service's JSON error while the client
  is still sending it, and nginx buffers none of it to a temp file; the same upload with the
  camera key is detected (and is buffered: the check can fail);
- DeepStack clients, whose key is in the multipart form, pass the edge and are checked by the
  service;
- a flood from 127.0.0.1 gets 429 while 127.0.0.2 is still served; failed keys hit the tighter
  refusal budget;
- HTTPS with the self-signed certificate answers /health/ready with HSTS and the app's one CSP,
  plain HTTP redirects; /metrics and /auth/check are closed at the edge; the admin allow-list
  refuses other networks with a JSON error;
- the service takes the client's address from nginx's X-Forwarded-For only, and only a valid IP
  address (issue 42): a forged header through nginx or `<script>` never becomes the client.
"""

from __future__ import annotations

import asyncio
import json
import select
import socket
import struct
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.conftest import start_server
from tests.deploy.nginx_util import REPLICAS, running_edge
from tests.deploy.secrets_util import admin_key, camera_key, init_secrets

pytestmark = pytest.mark.server
UPLOAD = 19 * 1024 * 1024
BUFFERED = "buffered to a temporary file"
FIRST = 1024 * 1024


def padded_jpeg(jpeg: bytes, size: int) -> bytes:
    """A valid JPEG of ``size`` bytes: the picture plus COM (comment) segments after SOI, which
    every decoder skips."""
    assert jpeg[:2] == b"\xff\xd8"
    pad = size - len(jpeg)
    segments = []
    while pad > 0:
        take = min(65533, pad - 4) if pad > 65537 else pad - 4
        take = max(take, 0)
        segments.append(b"\xff\xfe" + struct.pack(">H", take + 2) + b"\0" * take)
        pad -= take + 4
    out = jpeg[:2] + b"".join(segments) + jpeg[2:]
    assert len(out) == size, (len(out), size)
    return out


@pytest.fixture(scope="module")
def stack(tmp_path_factory, weights):
    tmp = tmp_path_factory.mktemp("edge")
    init_secrets(tmp / "secrets", tmp / "env")
    server = start_server(tmp, weights, api_keys_file=str(tmp / "secrets/api-keys.yaml"),
                          forwarded_allow_ips="127.0.0.1", auth_fail_limit=1000)  # nginx's budget, not the service's block
    port = urlsplit(server.url).port
    try:
        with running_edge(tmp, [port] * REPLICAS) as edge:
            yield edge, tmp / "secrets", server
    finally:
        server.proc.terminate()
        server.proc.wait(20)


def upload_without_reading(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, bytes, int]:
    """POST ``body``: the headers and its first MiB, then wait (up to 30 s) for an answer before
    sending the rest. Returns (status, the answer's body, bytes of the body sent when the answer
    came): a client still uploading when it was answered sent less than the whole."""
    parts = urlsplit(url)
    sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
    head = [f"POST {parts.path}?{parts.query} HTTP/1.1", f"Host: {parts.hostname}", f"Content-Length: {len(body)}",
            "Content-Type: image/jpeg", "Connection: close", *(f"{k}: {v}" for k, v in headers.items())]
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode())
    sent = len(body) if len(body) <= FIRST else FIRST
    try:
        sock.sendall(body[:sent])
        if not select.select([sock], [], [], 30)[0]:
            sock.sendall(body[sent:])
            sent = len(body)
    except (BrokenPipeError, ConnectionResetError):
        pass
    answer = b""
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            break
        if not chunk:
            break
        answer += chunk
    sock.close()
    head, _, rest = answer.partition(b"\r\n\r\n")
    return int(head.split()[1]), rest, sent


def test_a_keyless_19mb_upload_is_refused_before_its_body_is_read(stack, bus_jpg):
    edge, secrets, _ = stack
    body = padded_jpeg(bus_jpg, UPLOAD)
    before = edge.error_log().count(BUFFERED)
    status, answer, sent = upload_without_reading(f"{edge.internal}/detect?camera_id=gate-1", body, {})
    assert status == 401, answer
    assert sent < UPLOAD, f"the answer came only after all {UPLOAD} bytes"
    assert json.loads(answer)["error"] == "unauthorized", answer
    assert edge.error_log().count(BUFFERED) == before, "nginx wrote the keyless body to a temp file"
    assert not edge.body_temp_files()
    # a wrong key: 403 from the service's gate, before the body too
    status, answer, sent = upload_without_reading(f"{edge.internal}/detect?camera_id=gate-1", body,
                                                  {"X-API-Key": "w" * 32})
    assert status == 403 and sent < UPLOAD, (status, sent)
    assert edge.error_log().count(BUFFERED) == before
    # the same upload with the camera key is read, buffered and detected
    r = httpx.post(f"{edge.internal}/detect", params={"camera_id": "gate-1"}, content=body,
                   headers={"X-API-Key": camera_key(secrets), "content-type": "image/jpeg"}, timeout=120)
    assert r.status_code == 200, r.text
    assert any(d["class_name"] == "bus" for d in r.json()["detections"]), r.json()
    assert edge.error_log().count(BUFFERED) == before + 1


def test_deepstack_passes_the_edge_with_the_key_in_its_form(stack, bus_jpg):
    edge, secrets, _ = stack
    url = f"{edge.internal}/v1/vision/detection"
    r = httpx.post(url, files={"image": ("bus.jpg", bus_jpg, "image/jpeg")},
                   data={"api_key": camera_key(secrets)}, timeout=60)
    assert r.status_code == 200, r.text
    assert r.json()["success"] is True and any(p["label"] == "bus" for p in r.json()["predictions"])
    r = httpx.post(url, files={"image": ("bus.jpg", bus_jpg, "image/jpeg")}, data={"api_key": "w" * 32}, timeout=60)
    assert r.status_code in (401, 403), r.text


def test_the_edge_closes_metrics_and_its_own_check_and_answers_json(stack):
    edge, secrets, _ = stack
    key = {"X-API-Key": admin_key(secrets)}
    for path in ("/metrics", "/auth/check"):
        r = httpx.get(edge.internal + path, headers=key)
        assert r.status_code == 404 and r.json()["error"] == "not_found", (path, r.text)
    r = httpx.get(edge.internal + "/health")
    assert r.status_code == 401 and r.headers["content-type"].startswith("application/json"), r.text
    assert "nginx" not in r.text.lower()
    r = httpx.get(edge.internal + "/health", headers=key)
    assert r.status_code == 200, r.text
    assert "nginx/" not in r.headers.get("server", "")


def test_https_answers_with_hsts_and_http_redirects(stack):
    edge, secrets, _ = stack
    r = httpx.get(edge.https + "/health/ready", verify=str(edge.ca))
    assert r.status_code == 200, r.text
    assert r.headers["strict-transport-security"].startswith("max-age=")
    r = httpx.get(edge.https + "/ui/", verify=str(edge.ca), headers={"X-API-Key": admin_key(secrets)})
    assert r.status_code == 200
    assert len(r.headers.get_list("content-security-policy")) == 1, r.headers
    r = httpx.post(edge.http + "/detect?camera_id=c", content=b"x", follow_redirects=False)
    assert r.status_code == 308
    assert r.headers["location"] == f"https://127.0.0.1:{edge.https_port}/detect?camera_id=c"
    with pytest.raises(httpx.ConnectError):  # the self-signed certificate is not trusted by default
        httpx.get(edge.https + "/health/ready")


def from_address(address: str) -> httpx.Client:
    return httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=10)


def test_a_flood_from_one_address_is_limited_while_another_is_served(stack):
    edge, _, _ = stack
    async def flood() -> list[httpx.Response]:
        # 300 requests, 30 at a time: past the 100 burst + 20/s however slow a loaded machine
        # makes each one (sent one by one, 200 of them took longer than the budget refills)
        transport = httpx.AsyncHTTPTransport(local_address="127.0.0.1")
        async with httpx.AsyncClient(transport=transport, timeout=30) as client:
            gate = asyncio.Semaphore(30)

            async def one() -> httpx.Response:
                async with gate:
                    return await client.get(edge.internal + "/health/live")

            return await asyncio.gather(*(one() for _ in range(300)))

    answers = asyncio.run(flood())
    codes = [r.status_code for r in answers]
    assert codes[0] == 200 and 429 in codes and set(codes) <= {200, 429}, codes
    limited = answers[codes.index(429)]
    assert limited.json()["error"] == "too_many_requests" and limited.headers["retry-after"]
    with from_address("127.0.0.2") as other:
        assert other.get(edge.internal + "/health/live").status_code == 200


def test_wrong_keys_from_one_address_hit_the_refusal_budget(stack):
    edge, _, _ = stack
    with from_address("127.0.0.3") as bad:
        answers = [bad.get(edge.internal + "/health", headers={"X-API-Key": f"{i:032d}"}) for i in range(40)]
    codes = [r.status_code for r in answers]
    assert codes[0] == 403 and 429 in codes, codes
    assert all(r.json()["error"] for r in answers)
    throttled = answers[codes.index(429)]
    assert throttled.json()["error"] == "too_many_auth_failures" and "try again in 10 s" in throttled.json()["message"]
    assert throttled.headers["retry-after"] == "10"
    assert codes.index(429) >= 20, "the budget allows a burst of 20 refusals"
    with from_address("127.0.0.4") as other:
        assert other.get(edge.internal + "/health", headers={"X-API-Key": "w" * 32}).status_code == 403


def logged_client(server, start: int, line: str) -> str:
    """The ``client=`` of the first access-log line after offset ``start`` that begins with ``line``
    (written as the request finishes: waited for a few seconds)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        for entry in server.log()[start:].splitlines():
            if f"campusguard.access: {line} " in entry:
                return entry.split(" client=", 1)[1].split(" ", 1)[0]
        time.sleep(0.1)
    raise AssertionError(f"no access-log line {line!r}:\n{server.log()[start:][-2000:]}")


def test_the_service_takes_the_client_from_nginx_only_and_only_a_valid_address(stack):
    """The real `serve` (uvicorn's own proxy headers off, app/api/forwarded.py on): the service
    trusts 127.0.0.1 (nginx here). A valid address from it names the client; `<script>` from it
    leaves its own address; a client forging the header through nginx is logged as itself."""
    edge, _, server = stack
    with from_address("127.0.0.1") as proxy:
        start = len(server.log())
        assert proxy.get(server.url + "/health/live", headers={"X-Forwarded-For": "<script>"}).status_code == 200
        assert logged_client(server, start, "GET /health/live 200") == "127.0.0.1"
        start = len(server.log())
        assert proxy.get(server.url + "/health/ready", headers={"X-Forwarded-For": "203.0.113.9"}).status_code == 200
        assert logged_client(server, start, "GET /health/ready 200") == "203.0.113.9"
    with from_address("127.0.0.6") as forger:
        start = len(server.log())
        answer = forger.get(edge.internal + "/health", headers={"X-Forwarded-For": "203.0.113.10"})
        assert answer.status_code == 401
        assert logged_client(server, start, "GET /auth/check 401") == "127.0.0.6"  # nginx's edge check
    assert "<script>" not in server.log()


def test_the_admin_allow_list_refuses_other_networks(stack, tmp_path):
    edge, secrets, server = stack
    port = urlsplit(server.url).port
    (tmp_path / "secrets").symlink_to(secrets)
    with running_edge(tmp_path, [port] * REPLICAS, LB_ADMIN_ALLOW_NETS="10.0.0.0/8, 192.168.1.0/24") as fenced:
        key = {"X-API-Key": admin_key(secrets)}
        for path in ("/docs", "/audit", "/admin/site"):
            r = httpx.get(fenced.internal + path, headers=key)
            assert r.status_code == 403 and r.json()["error"] == "forbidden", (path, r.text)
        assert httpx.get(fenced.internal + "/health", headers=key).status_code == 200
    assert httpx.get(edge.internal + "/docs", headers=key).status_code == 200


def test_campusguard_env_refuses_a_value_that_is_not_a_network(tmp_path: Path):
    import subprocess

    from tests.deploy.conftest import DEPLOY

    r = subprocess.run(["sh", str(DEPLOY / "nginx/campusguard-env.sh")], capture_output=True, text=True,
                       env={"OUT": str(tmp_path), "LB_ADMIN_ALLOW_NETS": "10.0.0.0/8; deny all", "PATH": "/usr/bin:/bin"})
    assert r.returncode != 0 and "LB_ADMIN_ALLOW_NETS" in r.stderr
