"""A tiny real run of `campusguard bench-shadow` (yolov8n at 320, torch primary and reference):
both modes in the table and in the JSON, with figures that add up. Speed is not asserted
(the figures are the command's output, docs/benchmarks.md)."""

from __future__ import annotations

import json

import pytest

from app.cli import main

REQUESTS = 6


def test_bench_shadow_tiny_real_run(tmp_path, weights, dataset, monkeypatch, capsys):
    monkeypatch.setenv("CAMPUSGUARD_WEIGHTS", str(weights))
    monkeypatch.setenv("CAMPUSGUARD_THREADS", "1")
    out = tmp_path / "shadow-bench.json"
    rc = main(["bench-shadow", "--images", str(dataset / "images"), "--imgsz", "320", "--sample", "1",
               "--rps", "20", "--requests", str(REQUESTS), "--rounds", "1", "--out", str(out)])
    assert rc == 0
    data = json.loads(out.read_text())
    meta, rows = data["meta"], {r["mode"]: r for r in data["rows"]}
    assert (meta["backend"], meta["reference"], meta["imgsz"], meta["sample"]) == ("torch", "torch", "320", 1.0)
    assert meta["requests_per_round"] == REQUESTS and meta["rounds"] == 1 and len(meta["load_average"]) == 3
    assert list(rows) == ["off", "on"]
    for row in rows.values():
        assert row["requests"] == REQUESTS and 0 < row["admitted"] <= 1
        assert 0 < row["p50_ms"] <= row["p95_ms"]
    off, on = rows["off"], rows["on"]
    assert (off["sampled"], off["compared"], off["dropped"]) == (0, 0, 0)  # nothing offered while off
    admitted_on = round(on["admitted"] * REQUESTS)
    assert on["sampled"] == admitted_on  # sample 1: every answered frame
    assert on["compared"] + on["dropped"] == on["sampled"] and on["compared"] >= 1
    assert on["p50_vs_off"] == pytest.approx(on["p50_ms"] / off["p50_ms"])
    assert on["p95_vs_off"] == pytest.approx(on["p95_ms"] / off["p95_ms"])
    each = data["rounds"]
    assert [(r["round"], r["mode"], r["requests"]) for r in each] == [(1, "off", REQUESTS), (2, "on", REQUESTS)]
    for r in each:  # one round per mode: its figures are the mode's
        assert (r["p50_ms"], r["p95_ms"], r["sampled"]) == (rows[r["mode"]]["p50_ms"], rows[r["mode"]]["p95_ms"],
                                                             rows[r["mode"]]["sampled"])
    table = capsys.readouterr().out
    assert "| shadow | requests | p50 ms | p95 ms | admitted | p50 vs off | p95 vs off |" in table
    assert f"| off | {REQUESTS} | {off['p50_ms']:.1f} |" in table
    assert f"| on | {REQUESTS} | {on['p50_ms']:.1f} | {on['p95_ms']:.1f} |" in table
    assert f"{on['p50_vs_off']:.3f}" in table and f"wrote {out}" in table
    assert f"per round, p50 ms: off {off['p50_ms']:.1f}-{off['p50_ms']:.1f}, on {on['p50_ms']:.1f}-" in table


@pytest.mark.parametrize("args", [["--sample", "0"], ["--sample", "1.5"], ["--rps", "0"], ["--requests", "0"]])
def test_bench_shadow_refuses_bad_arguments_before_loading_a_model(tmp_path, args, capsys):
    out = tmp_path / "never.json"
    assert main(["bench-shadow", *args, "--out", str(out)]) == 2
    assert "--sample must be in (0, 1]" in capsys.readouterr().err and not out.exists()
