"""The campus load generator (issue 40): newest frame wins, one frame in flight per camera,
outcomes counted, the site file valid, real HTTP from several processes."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

from app.rules.site.loader import parse_site_bytes
from app.tooling.bench.campus import CampusPlan, camera_ids, run_camera, run_campus, server_cpu_seconds, site_yaml


class FakeClock:
    """Time that moves only when the camera sleeps or the fake server answers."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        assert seconds >= 0
        self.now += seconds


def plan(fps: float = 2.0, seconds: float = 10.0) -> CampusPlan:
    return CampusPlan(url="http://127.0.0.1:9", cameras=("cam-000",), fps=fps, seconds=seconds)


def test_a_fast_server_gets_every_frame_and_none_is_superseded():
    clock = FakeClock()
    sent: list[float] = []

    def post(camera: str, body: bytes) -> tuple[int, str]:
        sent.append(clock.now)
        clock.now += 0.05
        return 200, ""

    tally = run_camera("cam-000", [b"a", b"b"], plan(), 0.0, 10.0, clock=clock, sleep=clock.sleep, post=post)
    assert tally.offered == 20 and tally.sent == 20 and tally.answered == 20 and tally.superseded == 0
    assert sent == pytest.approx([k / 2 for k in range(20)])  # on the camera's clock, tick by tick
    assert len(tally.latencies_ms) == 20 and all(v == pytest.approx(50.0) for v in tally.latencies_ms)


def test_a_slow_server_sees_only_the_newest_frame_one_at_a_time():
    clock = FakeClock()
    in_flight = [0]
    bodies: list[bytes] = []

    def post(camera: str, body: bytes) -> tuple[int, str]:
        in_flight[0] += 1
        assert in_flight[0] == 1, "two frames of one camera in flight"
        bodies.append(body)
        clock.now += 1.3  # 2.6 tick intervals at 2 fps
        in_flight[0] -= 1
        return 200, ""

    frames = [bytes([k]) for k in range(40)]
    tally = run_camera("cam-000", frames, plan(), 0.0, 10.0, clock=clock, sleep=clock.sleep, post=post)
    # sent at 0, 1.3 (tick 2), 2.6 (tick 5), 3.9 (7), 5.2 (10), 6.5 (13), 7.8 (15), 9.1 (18), and tick 19
    # (produced at 9.5, waiting) at 10.4; ticks 1, 3, 4, 6, 8, 9, 11, 12, 14, 16, 17 superseded while a frame was out
    assert [b[0] for b in bodies] == [0, 2, 5, 7, 10, 13, 15, 18, 19]
    assert tally.sent == 9 and tally.answered == 9
    assert tally.superseded == 11
    assert tally.offered == 20 == tally.superseded + tally.sent


def test_refusals_and_failures_are_counted_apart():
    clock = FakeClock()
    answers = iter([(503, "HTTP 503"), (500, "HTTP 500: boom"), (0, "ConnectionResetError: reset")] + [(200, "")] * 20)

    def post(camera: str, body: bytes) -> tuple[int, str]:
        clock.now += 0.01
        return next(answers)

    tally = run_camera("cam-000", [b"x"], plan(seconds=3.0), 0.0, 3.0, clock=clock, sleep=clock.sleep, post=post)
    assert (tally.refused, tally.failed, tally.answered) == (1, 2, 3)
    assert tally.errors == ["HTTP 500: boom", "ConnectionResetError: reset"]


def test_the_site_file_lists_every_camera_and_is_valid(tmp_path: Path):
    cameras = camera_ids(300)
    assert cameras[0] == "cam-000" and cameras[-1] == "cam-299" and len(set(cameras)) == 300
    config = parse_site_bytes(site_yaml(cameras).encode(), tmp_path / "site.yaml")
    assert [c.id for c in config.cameras] == list(cameras)
    assert all(c.zones and c.zones[0].rules for c in config.cameras)


def test_server_cpu_is_read_from_the_metrics_text():
    text = "# HELP x\ncampusguard_process_cpu_seconds_total 12.5\ncampusguard_other 1\n"
    assert server_cpu_seconds(text) == 12.5
    assert server_cpu_seconds("nothing here\n") is None


def test_real_http_from_several_processes_keeps_one_frame_per_camera_in_flight():
    """A stdlib server that answers slowly: every request carries its camera and an ISO timestamp,
    no camera ever has two requests open, and the processes' tallies add up."""
    seen: dict[str, int] = {}
    open_now: dict[str, int] = {}
    overlap: list[str] = []
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
            query = parse_qs(urlsplit(self.path).query)
            camera = query["camera_id"][0]
            assert "T" in query["timestamp"][0]
            self.rfile.read(int(self.headers["Content-Length"]))
            with lock:
                open_now[camera] = open_now.get(camera, 0) + 1
                if open_now[camera] > 1:
                    overlap.append(camera)
                seen[camera] = seen.get(camera, 0) + 1
            threading.Event().wait(0.3)  # slower than the 0.2 s frame interval: frames get superseded
            with lock:
                open_now[camera] -= 1
            body = b"{}"
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        cameras = camera_ids(6)
        result = run_campus(CampusPlan(url=f"http://127.0.0.1:{server.server_port}", cameras=cameras, fps=5.0,
                                       seconds=2.0, processes=2), [b"\xff\xd8jpeg"], lead_s=0.5)
    finally:
        server.shutdown()
    assert overlap == []
    assert set(seen) == set(cameras)
    assert result["processes"] == 2 and result["failed"] == 0
    assert result["answered"] == sum(seen.values())
    assert result["superseded"] > 0 and result["offered"] == 60
    assert result["sent"] + result["superseded"] <= result["offered"]
    assert result["generator_cpu_s"] > 0
