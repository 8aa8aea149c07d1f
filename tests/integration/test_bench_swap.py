"""A short real run of `campusguard bench-swap` (issue 41 part 3's swap under load): a real
`campusguard serve` (torch at 320, no warm-up) under 4 keep-alive clients posting 1080p frames,
the weights behind its name replaced at 4 s of 8 by a copy whose class 0 is ``student``. Only
correctness is asserted (no request failed, the swap happened, the JSON has its fields): the
timing bounds are the command's output on a noisy machine (docs/benchmarks.md)."""

from __future__ import annotations

import json

import pytest

from app.cli import main
from tests.support.models import renamed_copy

pytestmark = [pytest.mark.server, pytest.mark.slow]  # a real server: 15 s alone, over 20 s beside other workers


def test_bench_swap_short_run_fails_no_request_and_swaps(tmp_path, weights, monkeypatch, capsys):
    monkeypatch.setenv("CAMPUSGUARD_WARMUP_ITERS", "0")
    monkeypatch.setenv("CAMPUSGUARD_THREADS", "1")
    campus = renamed_copy(weights, tmp_path / "campus.pt", {0: "student"})
    out = tmp_path / "bench-swap.json"
    rc = main(["bench-swap", "--weights", str(weights), "--swap-weights", str(campus), "--duration", "8",
               "--swap-at", "4", "--imgsz", "320", "--backend", "torch", "--json", str(out), "--no-progress",
               "--onnx-cache-dir", str(tmp_path / "cache")])
    assert rc in (0, 1)  # 1: a timing or memory bound missed on this machine; not asserted here
    data = json.loads(out.read_text())
    summary = data["summary"]
    assert summary["failed"] == 0 and summary["ok"] == summary["requests"] > 0, summary["first_errors"]
    assert set(summary["statuses"]) == {"200"}
    before, after = summary["models_before"], summary["models_after"]
    assert (before["weights"], after["weights"]) == (weights.name, f"{weights.stem}-swap.pt")
    assert before["classes"][0] == "person" and after["classes"][0] == "student"
    assert before["weights_sha256"] != after["weights_sha256"] and after["change"] is None
    assert data["swap"]["status"] == 200 and 4 <= data["swap"]["started_s"] < data["swap"]["switched_s"]
    for key in ("p50_before_ms", "p99_before_ms", "p99_around_switch_ms", "p99_ratio", "swap_seconds",
                "rss_before_mib", "rss_peak_mib", "rss_after_mib", "rss_after_vs_before", "bounds", "met"):
        assert key in summary, key
    assert summary["rss_before_mib"] > 0 and summary["rss_peak_mib"] >= summary["rss_before_mib"] * 0.5
    assert [b["bound"].split()[0] for b in summary["bounds"]] == ["0", "p99", "RSS", "the"]
    assert summary["bounds"][0]["met"] and summary["bounds"][3]["met"]
    assert rc == (0 if summary["met"] else 1)
    assert data["meta"]["imgsz"] == "320" and data["meta"]["server"]["backend"] == "torch"
    assert sum(t["requests"] for t in data["timeline"]) == summary["requests"]
    assert all(t["failed"] == 0 for t in data["timeline"]) and data["timeline"][3]["rss_mib"] > 0
    table = capsys.readouterr().out
    assert "requests ok / failed" in table and f"{summary['ok']} / 0" in table and f"wrote {out}" in table


@pytest.mark.parametrize(("args", "says"), [(["--swap-at", "10", "--duration", "8"], "--swap-at must be > 0"),
                                            (["--clients", "0"], "--clients must be >= 1"),
                                            (["--weights", "/nonexistent.pt"], "no such file")])
def test_bench_swap_refuses_bad_options_before_starting_a_server(tmp_path, weights, args, says, capsys):
    out = tmp_path / "never.json"
    assert main(["bench-swap", "--weights", str(weights), *args, "--json", str(out)]) == 2
    assert says in capsys.readouterr().err and not out.exists()
