"""bench-swap's arithmetic (app/tooling/bench/swap_report.py) on a made-up run: which requests
count as before the swap and around the switch, the memory figures, and each bound's verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.tooling.bench.swap import Reply, SwapPlan, SwapRun, window_covered
from app.tooling.bench.swap_report import rows, summarize, timeline

MIB = 2**20
PLAN = SwapPlan(weights=Path("yolov8n.pt"), duration_s=60, swap_at_s=30)


def made_up_run(around_ms: float = 200.0, rss_after: int = 1000 * MIB, statuses: tuple[int, ...] = ()) -> SwapRun:
    run = SwapRun()
    for i in range(100):  # one reply every 0.5 s at 100 ms, sent from 0 to 49.5 s
        sent = i * 0.5
        slow = 30.0 <= sent <= 35.0  # around the switch at 31 s
        run.replies.append(Reply(sent, sent + (around_ms if slow else 100.0) / 1e3, 200))
    for k, status in enumerate(statuses):
        run.replies.append(Reply(40.0 + k, 40.2 + k, status, "refused"))
    run.rss = [(t / 2, 1000 * MIB) for t in range(50, 60)] + [(30.5, 1400 * MIB), (35.0, 1100 * MIB)]
    run.swap = {"started_s": 30.0, "switched_s": 31.0, "seconds": 1.0, "status": 200, "weights": "yolov8n-swap.pt"}
    run.models_after = {"name": "yolov8n", "weights": "yolov8n-swap.pt", "change": None}
    run.rss_after, run.drained_at_s = rss_after, 32.0
    return run


def test_every_bound_met_by_a_clean_run():
    summary = summarize(PLAN, made_up_run())
    assert (summary["requests"], summary["ok"], summary["failed"]) == (100, 100, 0)
    assert summary["requests_before"] == 56  # sent from 2 s (after the warm-up), answered before the swap began
    assert summary["p99_before_ms"] == pytest.approx(100.0)
    assert summary["p99_around_switch_ms"] == pytest.approx(200.0) and summary["p99_ratio"] == pytest.approx(2.0)
    assert (summary["rss_before_mib"], summary["rss_peak_mib"], summary["rss_after_mib"]) == (1000, 1400, 1000)
    assert summary["rss_after_vs_before"] == 0 and summary["freed_after_switch_s"] == 1.0
    assert summary["requests_while_loading"] == 2 and summary["p99_while_loading_ms"] == pytest.approx(200.0)
    assert summary["rps_before"] == summary["rps_while_loading"] == 2.0  # one answer every 0.5 s
    assert summary["rps_after"] == pytest.approx(2.0, abs=0.05)
    assert [b["met"] for b in summary["bounds"]] == [True, True, True, True] and summary["met"]
    assert ("requests ok / failed", "100 / 0") in rows(summary)


def test_each_bound_fails_on_its_own():
    failed = summarize(PLAN, made_up_run(statuses=(503, 503, 0)))
    assert failed["failed"] == 3 and failed["statuses"] == {"200": 100, "503": 2, "connection_error": 1}
    assert [b["met"] for b in failed["bounds"]] == [False, True, True, True] and not failed["met"]
    slow = summarize(PLAN, made_up_run(around_ms=301.0))
    assert [b["met"] for b in slow["bounds"]] == [True, False, True, True]
    fat = summarize(PLAN, made_up_run(rss_after=1101 * MIB))
    assert fat["rss_after_vs_before"] == pytest.approx(0.101) and [b["met"] for b in fat["bounds"]] == [
        True, True, False, True]
    run = made_up_run()
    run.models_after = {"weights": "yolov8n.pt"}  # the PUT answered but the old weights still serve
    assert [b["met"] for b in summarize(PLAN, run)["bounds"]] == [True, True, True, False]


def test_the_load_covers_the_window_after_a_late_switch():
    run = SwapRun()
    assert window_covered(run, 10.0)  # no swap yet: the duration alone decides
    run.swap = {"switched_s": 58.0, "status": 200}
    assert not window_covered(run, 60.0) and window_covered(run, 63.0)
    run.swap = {"switched_s": 58.0, "status": 409}
    assert window_covered(run, 60.0)  # a refused swap: nothing to wait for


def test_the_timeline_counts_every_request_once_by_its_answer():
    run = made_up_run(statuses=(503,))
    seconds = timeline(run)
    assert len(seconds) == 50 and sum(t["requests"] for t in seconds) == 101
    assert seconds[40]["failed"] == 1 and seconds[31]["p99_ms"] == pytest.approx(200.0, abs=0.1)
    assert seconds[25]["rss_mib"] == 1000 and seconds[10]["rss_mib"] is None
