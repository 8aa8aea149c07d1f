"""A real `campusguard serve` with CAMPUSGUARD_FRONTENDS=2: one owner, two front-end processes
on one socket (issue 40, item 2), rules on with campus-load's site file as the device run has.

Each rule has its check here: every request counted once in /metrics whichever process
carried it; wrong keys spread over both front ends trip the failed-key throttle at the same
count as one process; a front end killed with SIGKILL under load costs only its in-flight
requests, is restarted, and the other keeps serving; the console and the frame routes answer.
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from app.tooling.bench.campus import camera_ids, site_yaml
from tests.conftest import REPO
from tests.support.net import free_port
from tests.support.wait import wait_for

pytestmark = pytest.mark.timeout(240)
KEY = "frontends-test-key-0123456789"
FAIL_LIMIT = 5
CAMERAS = camera_ids(2)
BUS = (Path(__import__("ultralytics").__file__).parent / "assets" / "bus.jpg").read_bytes()


class Server:
    def __init__(self, proc: subprocess.Popen, port: int) -> None:
        self.proc, self.port = proc, port

    def request(self, method: str, path: str, body: bytes | None = None, key: str | None = KEY,
                conn: http.client.HTTPConnection | None = None, **headers: str) -> tuple[int, dict, bytes]:
        own = conn or http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        if key:
            headers["X-API-Key"] = key
        own.request(method, path, body=body, headers=headers)
        response = own.getresponse()
        data = response.read()
        if conn is None:
            own.close()
        return response.status, dict(response.getheaders()), data

    def metrics(self) -> dict[str, float]:
        """Every sample of /metrics by its full name with labels."""
        status, _, text = self.request("GET", "/metrics")
        assert status == 200, text
        out = {}
        for line in text.decode().splitlines():
            if line and not line.startswith("#"):
                name, _, value = line.rpartition(" ")
                out[name] = float(value)
        return out

    def frontends(self) -> list[psutil.Process]:
        return [p for p in psutil.Process(self.proc.pid).children() if "app.frontend" in " ".join(p.cmdline())]

    def frontend_of(self, conn: http.client.HTTPConnection) -> int:
        """The pid of the front end holding this client connection (its server side)."""
        local = conn.sock.getsockname()[1]
        for process in self.frontends():
            if any(c.raddr and c.raddr.port == local for c in process.net_connections("tcp")):
                return process.pid
        raise AssertionError("no front end holds the connection")


def start(tmp_path_factory, weights: Path) -> Server:
    """The server as the device run starts it: rules on, with campus-load's site file."""
    port = free_port()
    site = tmp_path_factory.mktemp("site") / "site.yaml"
    site.write_text(site_yaml(CAMERAS))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPUSGUARD_")}
    env.update(CAMPUSGUARD_FRONTENDS="2", CAMPUSGUARD_PORT=str(port), CAMPUSGUARD_API_KEYS=KEY,
               CAMPUSGUARD_WEIGHTS=str(weights), CAMPUSGUARD_IMGSZ="320",
               CAMPUSGUARD_WARMUP_ITERS="0", CAMPUSGUARD_AUTH_FAIL_LIMIT=str(FAIL_LIMIT),
               CAMPUSGUARD_DATA_DIR=str(tmp_path_factory.mktemp("data")), YOLO_OFFLINE="1",
               CAMPUSGUARD_SITE_CONFIG=str(site), CAMPUSGUARD_CLIPS="false",
               TMPDIR=str(tmp_path_factory.mktemp("tmp")))  # the owner's socket folder (a killed owner leaves it)
    log = (tmp_path_factory.mktemp("log") / "serve.log").open("wb")
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve"], cwd=REPO, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    srv = Server(proc, port)

    def ready() -> bool:
        try:
            return srv.request("GET", "/health/ready")[0] == 200
        except OSError:
            return False

    try:
        wait_for(ready, timeout=120, step=0.3)
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return srv


@pytest.fixture(scope="module")
def server(tmp_path_factory, weights: Path) -> Iterator[Server]:
    srv = start(tmp_path_factory, weights)
    front_ends = srv.frontends()
    try:
        yield srv
    finally:
        front_ends += srv.frontends()  # the restarted one too
        srv.proc.send_signal(signal.SIGTERM)
        try:
            code = srv.proc.wait(30)
        except subprocess.TimeoutExpired:
            srv.proc.kill()
            srv.proc.wait()
            raise
    assert code == 0  # drained: the front ends first, then the owner
    assert not [p for p in front_ends if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def spread_connections(server: Server) -> dict[int, http.client.HTTPConnection]:
    """Keep-alive connections until each front end holds one: {front-end pid: connection}."""
    held: dict[int, http.client.HTTPConnection] = {}
    for _ in range(60):
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
        assert server.request("GET", "/health/live", conn=conn)[0] == 200
        pid = server.frontend_of(conn)
        if pid in held:
            conn.close()
        else:
            held[pid] = conn
        if len(held) == 2:
            return held
    raise AssertionError("the kernel gave every connection to one front end")


def test_frames_and_the_console_answer_through_the_front_ends(server: Server) -> None:
    status, _, body = server.request("POST", "/detect?camera_id=gate", BUS, **{"Content-Type": "image/jpeg"})
    assert status == 200 and b'"bus"' in body
    assert server.request("GET", "/ui/")[0] == 200
    health = json.loads(server.request("GET", "/health")[2])
    assert health["processes"]["frontends"] == 2 and health["processes"]["alive"] == 2
    assert server.request("GET", "/", key=None)[0] in (302, 307)


def test_a_cameras_frames_through_both_front_ends_meet_one_rules_owner(server: Server) -> None:
    """Frames of one camera over both front ends, the second captured earlier than the first
    (a late frame): both answered, the camera's clock stays at the newest capture time (the
    late one clamped by the one rules owner, as in one process), and its events are one set."""
    camera = CAMERAS[0]
    conns = list(spread_connections(server).values())
    now = dt.datetime.now(dt.timezone.utc).replace(microsecond=0, tzinfo=None)
    newer, older = now - dt.timedelta(seconds=5), now - dt.timedelta(seconds=10)
    for conn, when in ((conns[0], newer), (conns[1], older)):
        status, _, body = server.request("POST", f"/detect?camera_id={camera}&timestamp={when.isoformat()}",
                                         BUS, conn=conn, **{"Content-Type": "image/jpeg"})
        assert status == 200, body
    status, _, body = server.request("GET", f"/cameras/{camera}")
    assert status == 200, body
    # the last frame evaluated is the last one received, the late one (its capture time as sent;
    # the rules' own clock clamps it, as in one process: tests/unit/test_rules_logic.py)
    assert json.loads(body)["last_frame_at"].startswith(older.isoformat()), (json.loads(body), older)
    events = json.loads(server.request("GET", f"/events?camera_id={camera}")[2])["items"]
    assert [(e["rule"], e["state"]) for e in events] == [("intrusion", "started")]  # one event, from the first frame
    assert events[0]["started_at"].startswith(newer.isoformat())
    for conn in conns:
        conn.close()


def test_each_request_is_counted_once_whichever_front_end_carried_it(server: Server) -> None:
    conns = spread_connections(server)
    before = server.metrics()
    sent = 0
    for conn in conns.values():
        for _ in range(5):
            assert server.request("POST", "/detect", BUS, conn=conn, **{"Content-Type": "image/jpeg"})[0] == 200
            sent += 1
    after = server.metrics()
    route = 'campusguard_requests_total{route="/detect",status="200"}'
    assert after[route] - before.get(route, 0.0) == sent == 10
    carried = {k: after[k] - before.get(k, 0.0) for k in after if k.startswith("campusguard_frontend_requests_total")}
    assert sorted(carried.values()) == [5.0, 6.0]  # 5 frames each; one also carried the second /metrics
    handed = sum(v for k, v in after.items() if k.startswith("campusguard_frontend_requests_total"))
    answered = sum(v for k, v in after.items() if k.startswith("campusguard_requests_total"))
    assert handed == answered + 1  # the scrape itself is handed over before it is answered and counted
    assert after["campusguard_frontend_cpu_seconds_total"] > 0
    for conn in conns.values():
        conn.close()


def test_wrong_keys_spread_over_both_front_ends_trip_the_throttle_at_one_processs_count(server: Server) -> None:
    """The guesses come from 10.9.9.9 through a trusted proxy (loopback): the owner sees the
    address each front end passed on, and the other tests' address stays unblocked. They
    alternate between a frame (the front ends' compact path: the key checked there, counted by
    the owner) and GET /models (the owner's app) and between the front ends: one count."""
    conns = list(spread_connections(server).values())
    guess = {"X-Forwarded-For": "10.9.9.9"}
    frame = {"Content-Type": "image/jpeg"} | guess

    def attempt(i: int) -> int:
        if i % 2:
            return server.request("GET", "/models", key=f"wrong-{i}", conn=conns[i % 2], **guess)[0]
        return server.request("POST", "/detect?camera_id=gate", BUS, key=f"wrong-{i}", conn=conns[i % 2], **frame)[0]

    statuses = [attempt(i) for i in range(FAIL_LIMIT)]
    assert statuses[:-1] == [403] * (FAIL_LIMIT - 1), statuses  # wrong keys; the last one starts the block
    for conn in conns:  # blocked on both front ends and both paths, whatever key it sends now
        assert server.request("GET", "/models", conn=conn, **guess)[0] == 429
        status, headers, _ = server.request("POST", "/detect?camera_id=gate", BUS, conn=conn, **frame)
        assert status == 429 and int(headers["retry-after"]) >= 1
        assert server.request("GET", "/models", conn=conn)[0] == 200  # another address is not
        conn.close()


def test_a_killed_front_end_costs_only_its_in_flight_requests(server: Server) -> None:
    victim = server.frontends()[0]
    results: list[int | str] = []
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            try:  # a fresh connection each time, as many cameras' gateways would
                results.append(server.request("GET", "/health/live", key=None)[0])
            except (OSError, http.client.HTTPException) as exc:
                results.append(type(exc).__name__)

    threads = [threading.Thread(target=load) for _ in range(3)]
    for thread in threads:
        thread.start()
    time.sleep(1.0)
    before = len(results)
    victim.send_signal(signal.SIGKILL)
    time.sleep(2.0)
    after_kill = len(results)
    wait_for(lambda: len(server.frontends()) == 2 and victim.pid not in {p.pid for p in server.frontends()},
             timeout=20)
    time.sleep(0.5)
    stop.set()
    for thread in threads:
        thread.join()
    failed = [r for r in results if r != 200]
    assert len(failed) <= len(threads)  # at most one in flight per client thread was on the victim
    assert after_kill - before > 10  # the other front end kept serving meanwhile
    assert server.metrics()["campusguard_frontend_restarts_total"] == 1.0
    assert json.loads(server.request("GET", "/health")[2])["processes"] == {"frontends": 2, "alive": 2, "restarts": 1}


def test_front_ends_leave_when_the_owner_dies(tmp_path_factory, weights: Path) -> None:
    """A killed owner (its engine, rules and state gone) leaves no front end accepting frames
    no one answers: they exit, and the orchestrator restarts the container."""
    srv = start(tmp_path_factory, weights)
    front_ends = srv.frontends()
    assert len(front_ends) == 2
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait()
    gone, alive = psutil.wait_procs(front_ends, timeout=10)
    assert not alive and len(gone) == 2
