"""Report writers: JSON without NaN, CSV, Markdown tables, plots, and row merging."""

from __future__ import annotations

import csv
import json
import math

from app.tooling.bench import report
from app.tooling.bench import table as command


def _rows():
    rows = []
    for kind, backend, batch, fps in [("ultralytics", "torch", 1, 20.0), ("raw", "onnx", 1, 50.0),
                                      ("library", "onnx", 1, 48.0), ("raw", "onnx", 4, 60.0),
                                      ("library", "onnx", 4, 55.0)]:
        rows.append({"device": "cpu", "device_name": "CPU", "size": "n", "model": "yolov8n", "kind": kind,
                     "backend": backend, "provider": "p", "precision": "fp32", "batch": batch, "iterations": 3,
                     "images": 3 * batch, "seconds": 1.0, "fps": fps, "lat_p50_ms": 10.0, "lat_p95_ms": 11.0,
                     "lat_p99_ms": math.nan, "lat_mean_ms": 10.5, "per_image_ms": 1e3 / fps, "peak_mem_mb": 900.0,
                     "mem_source": "rss", "vs_raw": None, "vs_ultralytics": None})
    command.add_ratios(rows)
    return rows


def test_markdown_table_formats_and_dashes():
    text = report.markdown_table([{"a": 1.234, "b": None, "c": "x"}, {"a": math.nan, "b": 2, "c": True}],
                                 [("a", "A", 2), ("b", "B", 0), ("c", "C", 0)])
    assert text.splitlines() == ["| A | B | C |", "|---|---|---|", "| 1.23 | – | x |", "| – | 2 | True |"]


def test_bench_outputs(tmp_path):
    rows = _rows()
    files = command.write_outputs(tmp_path, rows, {"host": "h", "command": "campusguard bench"}, plots=True)
    names = {f.name for f in files}
    assert {"bench.json", "bench.csv", "bench.md", "bench_fps.png", "bench_latency.png", "bench_memory.png"} <= names
    data = json.loads((tmp_path / "bench.json").read_text())  # strict JSON: NaN became null
    assert data["rows"][0]["kind"] == "ultralytics"
    assert any(r["lat_p99_ms"] is None for r in data["rows"])
    checks = {(t["target"], t["batch"]): t for t in data["targets"]}
    assert checks[("onnx library >= 95% of raw session.run", 1)]["met"] is True  # 48/50
    assert checks[("onnx library >= 95% of raw session.run", 4)]["met"] is False  # 55/60
    assert checks[("onnx >= 1.3x Ultralytics predict loop, best batch (4)", 4)]["value"] == 2.75
    with (tmp_path / "bench.csv").open() as fh:
        table = list(csv.DictReader(fh))
    assert table[0].keys() >= {"device", "size", "backend", "precision", "batch", "fps", "lat_p50_ms", "lat_p99_ms",
                               "peak_mem_mb"}
    md = (tmp_path / "bench.md").read_text()
    assert "peak RSS MB" in md and "| n | library | onnx | fp32 | 4 | 55.0 |" in md
    for png in ("bench_fps.png", "bench_memory.png"):
        assert (tmp_path / png).read_bytes()[:4] == b"\x89PNG"


def test_gpu_rows_label_memory_as_vram(tmp_path):
    rows = _rows()
    for r in rows:
        r["mem_source"] = "vram"
    command.write_outputs(tmp_path, rows, {}, plots=False)
    assert "peak VRAM MB" in (tmp_path / "bench.md").read_text()


def test_merge_replaces_rows_with_the_same_key():
    old = _rows()
    new = [dict(old[1], fps=99.0)]
    merged = command.merge(old, new)
    assert len(merged) == len(old)
    assert [r["fps"] for r in merged if r["kind"] == "raw" and r["batch"] == 1] == [99.0]


def test_rows_compare_with_onnx_fp32_of_the_same_kind_and_batch():
    rows = _rows()
    extra = dict(rows[2], backend="openvino", precision="int8", fps=120.0)  # library, batch 1
    rows.append(extra)
    command.add_ratios(rows)
    assert extra["vs_onnx_fp32"] == 2.5 and rows[2]["vs_onnx_fp32"] == 1.0
    assert rows[0]["vs_onnx_fp32"] is None  # the Ultralytics loop has no onnx counterpart


def test_a_reports_command_line_never_shows_an_api_key_or_a_urls_credentials():
    from app.tooling.bench.report import command_line

    shown = command_line("loadtest", ["--url", "https://ops:S3cretPw@det.campus:8443/p?token=T0K", "--api-key", "K3Y-abc",
                                      "--api-key=K3Y-def", "--concurrency", "1,2"])
    assert shown == "campusguard loadtest --url https://***@det.campus:8443/p --api-key *** --api-key=*** --concurrency 1,2"
    for secret in ("S3cretPw", "T0K", "K3Y-abc", "K3Y-def", "ops"):
        assert secret not in shown
