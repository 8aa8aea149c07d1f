"""Percentile, summary, ratio and growth arithmetic of the benchmark reports."""

from __future__ import annotations

import math

import numpy as np
import pytest

from app.tooling.bench import stats
from app.tooling.bench.table import add_ratios
from app.tooling.bench.loadtest import micro_batch_bound
from app.tooling.bench.loadtest import targets as loadtest_targets


@pytest.mark.parametrize("q", [0, 1, 25, 50, 90, 95, 99, 100])
@pytest.mark.parametrize("n", [1, 2, 7, 100, 1001])
def test_percentile_matches_numpy_linear(q, n):
    values = list(np.random.default_rng(n).exponential(10.0, n))
    assert stats.percentile(values, q) == pytest.approx(float(np.percentile(values, q)), rel=1e-12)


def test_percentile_small_cases():
    assert stats.percentile([5.0], 99) == 5.0
    assert stats.percentile([1, 2, 3, 4], 50) == 2.5
    assert stats.percentile([10, 0], 100) == 10
    assert stats.percentile([3, 1, 2], 0) == 1  # order of the input does not matter
    assert math.isnan(stats.percentile([], 50))
    with pytest.raises(ValueError):
        stats.percentile([1.0], 101)


def test_summarize():
    s = stats.summarize([float(v) for v in range(1, 101)])
    assert (s.count, s.min, s.max, s.mean) == (100, 1, 100, 50.5)
    assert s.p50 == pytest.approx(50.5)
    assert s.p95 == pytest.approx(95.05)
    assert s.p99 == pytest.approx(99.01)
    assert s.as_dict("lat_")["lat_p99"] == s.p99
    assert stats.summarize([]).count == 0 and math.isnan(stats.summarize([]).p50)


def test_throughput_and_error_rate():
    assert stats.throughput(120, 4.0) == 30.0
    assert stats.throughput(0, 1.0) == 0.0
    assert stats.throughput(5, 0.0) == 0.0
    assert stats.error_rate(3, 12) == 0.25
    assert stats.error_rate(0, 0) == 0.0


def test_ratio_edge_cases():
    assert stats.ratio(95.0, 100.0) == pytest.approx(0.95)
    assert stats.ratio(1.0, 0.0) is None
    assert stats.ratio(None, 1.0) is None
    assert stats.ratio(1.0, None) is None
    assert stats.ratio(math.nan, 1.0) is None


def test_growth_from_end_of_first_tenth():
    samples = [(0, 900.0), (500, 1000.0), (1000, 1010.0), (5000, 1020.0), (10_000, 1030.0)]
    g = stats.growth(samples, total=10_000)
    assert g == {"baseline": 1010.0, "end": 1030.0, "growth": 20.0, "peak": 1030.0}
    # no sample inside the head: the first sample is the baseline
    assert stats.growth([(2000, 5.0), (4000, 4.0)], total=10_000)["growth"] == -1.0
    assert stats.growth([], total=10)["growth"] is None


def _row(kind, backend, batch, fps, size="n", precision="fp32", device="cpu"):
    return {"kind": kind, "backend": backend, "batch": batch, "fps": fps, "size": size,
            "precision": precision, "device": device}


def test_bench_ratios_pair_rows_by_backend_size_batch():
    rows = [_row("ultralytics", "torch", 1, 20.0), _row("raw", "onnx", 1, 50.0), _row("library", "onnx", 1, 48.0),
            _row("raw", "onnx", 4, 60.0), _row("library", "onnx", 4, 57.0), _row("raw", "torch", 1, 25.0),
            _row("library", "torch", 1, 24.0), _row("library", "onnx", 1, 10.0, size="m")]
    add_ratios(rows)
    by = {(r["kind"], r["backend"], r["batch"], r["size"]): r for r in rows}
    assert by[("library", "onnx", 1, "n")]["vs_raw"] == pytest.approx(0.96)
    assert by[("library", "onnx", 4, "n")]["vs_raw"] == pytest.approx(0.95)
    assert by[("library", "onnx", 4, "n")]["vs_ultralytics"] == pytest.approx(2.85)
    assert by[("raw", "onnx", 1, "n")]["vs_raw"] == 1.0
    assert by[("ultralytics", "torch", 1, "n")]["vs_raw"] == pytest.approx(0.8)  # torch raw at batch 1
    assert by[("ultralytics", "torch", 1, "n")]["vs_ultralytics"] == 1.0
    assert by[("library", "onnx", 1, "m")]["vs_raw"] is None  # no raw row for m
    assert by[("library", "onnx", 1, "m")]["vs_ultralytics"] is None


def test_micro_batch_target_arithmetic():
    assert micro_batch_bound(100.0, 4.0) == 600.0
    base = {"requests": 10, "errors": 0}
    rows = [base | {"concurrency": 1, "ok": 10, "rps": 10.0, "lat_p99_ms": 100.0, "mean_batch": 1.0},
            base | {"concurrency": 16, "ok": 10, "rps": 12.0, "lat_p99_ms": 900.0, "mean_batch": 4.0}]
    checks = {c["target"].split()[0]: c for c in loadtest_targets(rows, library_fps=12.5)}
    assert checks["server"]["value"] == pytest.approx(12.0 / 12.5)
    assert checks["server"]["met"] is True
    assert checks["p99(c=16)"]["value"] == pytest.approx(900.0 / 400.0)
    assert checks["p99(c=16)"]["met"] is False
    assert checks["no"]["met"] is True


def test_server_target_prefers_the_baseline_measured_before_the_level():
    base = {"requests": 10, "errors": 0, "ok": 10, "lat_p99_ms": 100.0, "mean_batch": 1.0}
    rows = [base | {"concurrency": 1, "rps": 5.0, "library_fps": 6.0},
            base | {"concurrency": 8, "rps": 6.0, "library_fps": 6.5}]
    check = loadtest_targets(rows, library_fps=20.0)[0]
    assert check["value"] == pytest.approx(6.0 / 6.5)  # best level (c=8) against its own baseline
    assert "c=8" in check["detail"] and "just before" in check["detail"]
