"""Tiny real runs of the three benchmark commands (yolov8n, a few iterations)."""

from __future__ import annotations

import json

import pytest

from app.cli import main
from tests.support.net import free_port


def test_bench_tiny_real_run(tmp_path, weights, dataset, onnx_cache):
    out = tmp_path / "bench"
    rc = main(["bench", "--sizes", "n", "--weights", f"n={weights}", "--batches", "1,2", "--iterations", "2",
               "--warmup", "1", "--imgsz", "320", "--images", str(dataset / "images"), "--max-images", "4",
               "--onnx-cache-dir", str(onnx_cache), "--out", str(out), "--no-progress"])
    assert rc == 0
    data = json.loads((out / "bench.json").read_text())
    rows = data["rows"]
    kinds = {(r["kind"], r["backend"], r["batch"]) for r in rows}
    assert kinds == {("ultralytics", "torch", 1)} | {(k, b, n) for k in ("raw", "library")
                                                      for b in ("torch", "onnx") for n in (1, 2)}
    assert {r["status"] for r in rows} == {"ok"} and {r["precision"] for r in rows} == {"fp32"}
    for r in rows:
        assert r["fps"] > 0 and r["lat_p50_ms"] > 0 and r["lat_p99_ms"] >= r["lat_p50_ms"]
        assert r["peak_mem_mb"] > 100  # RSS of a process holding torch
        assert r["device_name"] and r["provider"]
        assert r["vs_ultralytics"] is not None
        assert r["vs_raw"] is not None
        assert r["images"] == 2 * r["batch"]
    assert {r["provider"] for r in rows if r["backend"] == "onnx"} == {"CPUExecutionProvider"}
    assert any(t["target"].startswith("onnx library") for t in data["targets"])
    for name in ("bench.csv", "bench.md", "bench_fps.png", "bench_latency.png", "bench_memory.png"):
        assert (out / name).stat().st_size > 0
    # re-rendering from bench.json measures nothing and rewrites the same table
    before = (out / "bench.md").read_text()
    assert main(["bench", "--out", str(out), "--render", "--no-plots"]) == 0
    assert (out / "bench.md").read_text() == before


@pytest.fixture(scope="module")
def server(tmp_path_factory, weights):
    """One onnx server for the loadtest and the soak command."""
    from tests.conftest import start_server

    srv = start_server(tmp_path_factory.mktemp("bench-server"), weights, backend="onnx", max_batch_size=4,
                       max_queue_delay_ms=5)
    yield srv
    srv.stop()


def test_loadtest_tiny_real_run(tmp_path, server, dataset, weights, onnx_cache):
    out = tmp_path / "loadtest"
    rc = main(["loadtest", "--url", server.url, "--concurrency", "1,4", "--requests", "6", "--warmup", "1",
               "--images", str(dataset / "images"), "--out", str(out), "--no-progress",
               "--library-check", "2", "--baseline-batch", "2", "--library-weights", str(weights),
               "--onnx-cache-dir", str(onnx_cache), "--threads", "1"])
    assert rc == 0
    data = json.loads((out / "loadtest.json").read_text())
    rows = {r["concurrency"]: r for r in data["rows"]}
    assert set(rows) == {1, 4}
    for r in rows.values():
        assert r["requests"] == 6 and r["errors"] == 0 and r["rps"] > 0
        assert r["lat_p99_ms"] >= r["lat_p50_ms"] > 0
        assert r["batches"] >= 1 and sum(r["batch_buckets"].values()) == r["batches"]
    assert rows[1]["batch_buckets"] == {"1": 6}  # one request in flight: every batch holds one image
    assert all(r["library_fps"] > 0 and r["vs_library"] > 0 for r in rows.values())
    assert any(t["target"].startswith("server end-to-end") for t in data["targets"])
    assert data["meta"]["server"]["backend"] == "onnx"
    for name in ("loadtest.csv", "loadtest.md", "loadtest.png"):
        assert (out / name).stat().st_size > 0


def test_soak_tiny_real_run(tmp_path, server, dataset):
    out = tmp_path / "soak"
    rc = main(["soak", "--url", server.url, "--requests", "12", "--concurrency", "3", "--variants", "3",
               "--sample-every", "4", "--images", str(dataset / "images"), "--out", str(out), "--no-progress"])
    assert rc == 0
    data = json.loads((out / "soak.json").read_text())
    summary = data["summary"]
    assert summary["requests"] == 12 and summary["errors"] == 0
    assert [s["requests"] for s in data["samples"]] == [0, 4, 8, 12]
    assert summary["rss_growth_mb"] is not None and summary["rss_end_mb"] > 100
    assert [list(s) for s in data["meta"]["frame_sizes"]] == [[64, 64], [3840, 2160], [640, 480]]
    for name in ("soak.csv", "soak.md", "soak.png"):
        assert (out / name).stat().st_size > 0


def small_labelled_set(dataset, folder, n: int = 6):
    """A YOLO folder of the first ``n`` coco-val128 images and their labels (a few calibration frames)."""
    import shutil

    for sub in ("images", "labels"):
        (folder / sub).mkdir(parents=True)
    for image in sorted((dataset / "images").glob("*.jpg"))[:n]:
        shutil.copy(image, folder / "images" / image.name)
        label = dataset / "labels" / f"{image.stem}.txt"
        if label.is_file():
            shutil.copy(label, folder / "labels" / label.name)
    return folder


@pytest.mark.slow
@pytest.mark.server
def test_bench_service_stage_with_the_anchor(tmp_path, weights, dataset, monkeypatch):
    """--stage service at a tiny scale with the anchor (Ultralytics predict on its own OpenVINO int8
    export at the 16:9 shape): every contestant measured, the ratios against the anchor written, the
    export built in the cache folder (not beside the weights) and nothing fetched from the network."""
    pytest.importorskip("openvino")
    pytest.importorskip("nncf")
    import socket

    attempts: list = []
    connect = socket.socket.connect

    def loopback_only(sock, address):
        host = address[0] if isinstance(address, tuple) else str(address)
        if isinstance(address, tuple) and host not in ("127.0.0.1", "::1", "localhost"):
            attempts.append(address)
            raise OSError(f"the bench tried the network: {address}")
        return connect(sock, address)

    monkeypatch.setattr(socket.socket, "connect", loopback_only)
    frames = small_labelled_set(dataset, tmp_path / "frames")
    cache, out = tmp_path / "cache", tmp_path / "service"
    rc = main(["bench", "--stage", "service", "--service-variants", "openvino:fp32", "--anchor", "--imgsz", "320",
               "--weights", f"n={weights}", "--images", str(frames / "images"), "--onnx-cache-dir", str(cache),
               "--threads", "1", "--clients", "2", "--stage-seconds", "3", "--rounds", "1", "--calibration-images", "4",
               "--port", str(free_port()), "--out", str(out)])
    assert rc == 0
    assert attempts == []
    data = json.loads((out / "stage-service.json").read_text())
    assert data["shape"] == "192x320" and data["variants"] == ["openvino fp32"]
    names = set(data["img_s"])
    assert names == {"server openvino fp32 t1 1080p", "bare model call openvino fp32 192x320 t1",
                     "ultralytics predict 1080p", "anchor: ultralytics predict openvino int8 192x320 1080p"}
    assert all(rate > 0 for rate in data["img_s"].values())
    labels = set(data["ratios"])
    assert any(label.startswith("openvino fp32 server / the anchor") for label in labels), labels
    assert any(label.startswith("openvino fp32: server / bare model call") for label in labels), labels
    assert any(label.startswith("openvino fp32 server / Ultralytics torch predict loop") for label in labels), labels
    assert all(ratio > 0 for ratio in data["ratios"].values()) and set(data["ratio_ranges"]) == labels
    exports = list((cache / "anchor").glob("*/yolov8n_int8_openvino_model/yolov8n.xml"))
    assert len(exports) == 1 and "192x320-int8" in exports[0].parent.parent.name
    assert not list(weights.parent.glob("*openvino*"))  # never beside the weights
    meta = data["meta"]
    assert meta["load_average_start"] and meta["load_average_end"]
