"""Bench keeps what it measured when a row fails; loadtest fails when any level had errors."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from app.tooling.bench.runner import Bench
from app.cli import main
from app.core.errors import ConfigError


@pytest.fixture()
def images(tmp_path) -> Path:
    import cv2

    folder = tmp_path / "images"
    folder.mkdir()
    for i in range(2):
        cv2.imwrite(str(folder / f"{i}.jpg"), np.full((48, 64, 3), 40 * i, np.uint8))
    return folder


def test_a_failing_row_keeps_the_table_and_reports_the_failure(monkeypatch, tmp_path, images):
    out = tmp_path / "bench"
    seen_on_disk: list[int] = []

    def backend_rows(self, plan, backend, describe):
        from app.tooling.bench.table import make_row

        if backend == "onnx":
            raise ConfigError("device 'cuda:0' needs a GPU execution provider")
        yield make_row(plan, "raw", backend, "torch-cpu", "cpu", "CPU", 1, [5.0, 6.0], 2, 0.011, 1 << 20, "rss")
        seen_on_disk.append(len(json.loads((out / "bench.json").read_text())["rows"]))  # written before the next
        raise RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(Bench, "backend_rows", backend_rows)
    rc = main(["bench", "--sizes", "n", "--batches", "1,4", "--references", "raw", "--images", str(images),
               "--out", str(out), "--no-plots", "--no-progress", "--iterations", "2", "--warmup", "0"])
    assert rc == 0 and seen_on_disk == [1]
    rows = json.loads((out / "bench.json").read_text())["rows"]
    status = {(r["backend"], r["status"].split(":")[0]) for r in rows}
    assert status == {("torch", "ok"), ("torch", "error"), ("onnx", "not available on this machine")}
    failed = next(r for r in rows if r["status"].startswith("error"))
    assert "RuntimeError: CUDA out of memory" in failed["status"] and failed["fps"] is None
    md = (out / "bench.md").read_text()
    assert "Rows that did not run" in md and "needs a GPU execution provider" in md


class _Flaky(BaseHTTPRequestHandler):
    """Ready, no metrics, and every third /detect answered 500."""

    count = 0

    def log_message(self, *args) -> None:
        pass

    def _send(self, status: int, body: bytes) -> None:
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        self._send(200 if self.path == "/health/ready" else 404, b"{}")

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).count += 1
        self._send(500 if type(self).count % 3 == 0 else 200, b'{"detections": []}')


def test_loadtest_exits_non_zero_when_a_level_had_errors(tmp_path, images):
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        rc = main(["loadtest", "--url", f"http://127.0.0.1:{server.server_port}", "--concurrency", "1,2",
                   "--requests", "6", "--warmup", "0", "--images", str(images), "--out", str(tmp_path / "lt"),
                   "--no-plots", "--no-progress", "--ready-timeout", "5"])
    finally:
        server.shutdown()
    rows = json.loads((tmp_path / "lt" / "loadtest.json").read_text())["rows"]
    assert all(r["ok"] for r in rows) and any(r["errors"] for r in rows)
    assert rc == 1
