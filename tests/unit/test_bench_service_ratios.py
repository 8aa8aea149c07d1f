"""The service stage's ratios: which pairs exist for which servers, and their medians of per-round ratios."""

from __future__ import annotations

import http.server
import threading

import pytest

from app.tooling.bench import service_ratios
from app.tooling.bench.service_ratios import measure, server_step


class SliceClock:
    """``time`` for ``measure`` in place of wall time: it moves only when a contestant spends its
    slice, by exactly that slice, so each rate is exact however loaded the machine is (sleeping
    contestants on the wall clock overshoot their slices under load and skew the ratios)."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


def constant(clock: SliceClock, rate: float):
    """A contestant that 'answers' ``rate`` images per second of its slice (no real work)."""

    def run(seconds: float) -> int:
        clock.now += seconds
        return round(rate * seconds)

    return run


def test_the_anchor_and_bf16_ratios_are_computed_for_the_servers_present(monkeypatch):
    clock = SliceClock()
    monkeypatch.setattr(service_ratios, "time", clock)
    contestants = {
        "server openvino int8 t2 1080p": constant(clock, 300),
        "bare model call openvino int8 384x640 t2": constant(clock, 400),
        "server openvino bf16 t2 1080p": constant(clock, 200), "server onnx fp32 t2 1080p": constant(clock, 100),
        "ultralytics predict 1080p": constant(clock, 50),
        "anchor: ultralytics predict openvino int8 384x640 1080p": constant(clock, 240),
    }
    result = measure(contestants, seconds=2.4, rounds_n=2, threads=2)  # 0.2 s slices
    ratios = result["ratios"]
    assert set(result["ratio_ranges"]) == set(ratios)
    assert all(low <= ratios[k] <= high for k, (low, high) in result["ratio_ranges"].items())
    by_label = {label.split(", server")[0]: value for label, value in ratios.items()}
    assert by_label["openvino int8 server / the anchor, Ultralytics on its OpenVINO int8 (openvino int8: >= 1.25)"] == \
        pytest.approx(1.25)
    assert by_label["openvino bf16 server / onnx fp32 server (>= 1.6)"] == pytest.approx(2.0)
    assert by_label["openvino int8: server / bare model call"] == pytest.approx(0.75)
    assert by_label["onnx fp32 server / Ultralytics torch predict loop (onnx int8: >= 3)"] == pytest.approx(2.0)
    assert result["img_s"]["server onnx fp32 t2 1080p"] == pytest.approx(100)
    assert clock.now == pytest.approx(2.4 + 6 * 0.2)  # the rounds' slices, after one untimed slice each
    # no bare onnx call, no full-decode loop, no onnx int8 server: no ratio against them
    assert not any(label.startswith(("onnx fp32: server / bare", "onnx int8", "bus.jpg")) for label in by_label)
    assert "openvino bf16: server / bare model call" not in by_label  # its bare call was not timed


def test_without_the_anchor_no_anchor_ratio(monkeypatch):
    clock = SliceClock()
    monkeypatch.setattr(service_ratios, "time", clock)
    contestants = {"server onnx fp32 t1 1080p": constant(clock, 100), "ultralytics predict 1080p": constant(clock, 50)}
    ratios = measure(contestants, seconds=0.2, rounds_n=1, threads=1)["ratios"]
    label = "onnx fp32 server / Ultralytics torch predict loop (onnx int8: >= 3), server 1 thread(s) vs 1"
    assert ratios == {label: pytest.approx(2.0)}


class _Detect(http.server.BaseHTTPRequestHandler):
    """POST <prefix>/detect: 200 with a tiny JSON body while ``status`` says so (a body cut short
    while ``truncate``); keeps the bodies, the paths and the clients' connections."""

    protocol_version = "HTTP/1.1"  # keep-alive, as uvicorn
    status = 200
    truncate = False
    bodies: list[bytes] = []
    paths: list[str] = []
    peers: list[tuple[str, int]] = []

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        cls = type(self)
        cls.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
        cls.paths.append(self.path)
        cls.peers.append(self.client_address)
        reply = b'{"detections": []}'
        self.send_response(cls.status)
        self.send_header("Content-Length", str(len(reply) + (100 if cls.truncate else 0)))
        self.end_headers()
        self.wfile.write(reply)
        self.close_connection = cls.truncate  # the promised rest never comes

    def log_message(self, *args) -> None:
        pass


class TickPerLook:
    """A clock for ``server_step`` in place of wall time: each thread's clock starts at 0 and
    advances one tick each time that thread reads it. The step reads the clock once for its
    deadline and each client once per request, so a window of N ticks is exactly N requests per
    client however slowly the threads start (a 0.3 s wall-clock window once saw none under load)."""

    def __init__(self) -> None:
        self.local = threading.local()

    def perf_counter(self) -> float:
        now = getattr(self.local, "now", 0)
        self.local.now = now + 1
        return float(now)


def test_the_server_step_posts_the_frame_on_keep_alive_connections_and_counts_answers(monkeypatch):
    monkeypatch.setattr(service_ratios, "time", TickPerLook())
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Detect)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        _Detect.bodies, _Detect.paths, _Detect.peers = [], [], []
        answered = server_step(url, b"\xff\xd8frame", 2)(3)
        assert answered == len(_Detect.bodies) == 6 and set(_Detect.bodies) == {b"\xff\xd8frame"}
        assert len(set(_Detect.peers)) == 2  # one connection per client, kept alive across its requests
        _Detect.paths = []
        server_step(url + "/edge/", b"\xff\xd8frame", 1)(1)
        assert set(_Detect.paths) == {"/edge/detect"}  # the URL's path prefix is kept
        _Detect.status, _Detect.bodies = 500, []
        with pytest.raises(RuntimeError, match="2 of 2 clients failed: .* answered 500"):
            server_step(url, b"\xff\xd8frame", 2)(3)  # no rate from failed requests
        assert len(_Detect.bodies) == 2  # each client stopped at its error
        _Detect.status, _Detect.truncate = 200, True
        with pytest.raises(RuntimeError, match="2 of 2 clients failed: .*IncompleteRead"):
            server_step(url, b"\xff\xd8frame", 2)(3)  # a broken answer is a failure, not a count
        with pytest.raises(ValueError, match="http or https"):
            server_step("ftp://127.0.0.1:1", b"x", 1)
    finally:
        _Detect.status, _Detect.truncate = 200, False
        server.shutdown()
        server.server_close()
