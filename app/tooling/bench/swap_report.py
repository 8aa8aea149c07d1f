"""The figures of `campusguard bench-swap` and issue 41's bounds, from what a run observed
(app/tooling/bench/swap.py), with no I/O so the arithmetic is checked on its own.

- requests: ok (2xx) and failed (any other status, or no answer), with counts by status;
- latency: p50/p99 of the requests answered before the swap began (after the first
  ``WARMUP_S``: the first 1080p frames pay one-off allocations), and p99 of those answered
  within ``WINDOW_S`` of the switch (the moment ``PUT`` answered: the traffic moves just before);
- p99 and requests/s while the new copy loads (from the ``PUT`` to its answer), which the bound
  does not look at but an operator would;
- the swap's own duration (the ``PUT``: checks, load and warm-up beside the serving copy, switch);
- resident memory of the server process: the median of the samples in the ``WINDOW_S`` before
  the swap began (under load), the peak from then on, and once ``GET /models`` shows the change
  finished after the load (the bound's "after"); beside it the median of the samples taken
  under load from 1 s after the old copy was freed, when that happened before the load ended.

Bounds (issue 41, "Done when"): 0 failed requests; p99 around the switch <= 3x p99 before;
RSS after within 10 % of before.
"""

from __future__ import annotations

import statistics
from typing import Any

from app.tooling.bench.stats import percentile, ratio
from app.tooling.bench.swap import Reply, SwapPlan, SwapRun

WARMUP_S = 2.0
WINDOW_S = 5.0
P99_BOUND = 3.0
RSS_BOUND = 0.10
MIB = 2**20


def summarize(plan: SwapPlan, run: SwapRun) -> dict[str, Any]:
    """The run's figures and the bounds, as the JSON holds them."""
    replies = run.replies
    failed = [r for r in replies if not r.ok]
    statuses: dict[str, int] = {}
    for r in replies:
        key = str(r.status) if r.status else "connection_error"
        statuses[key] = statuses.get(key, 0) + 1
    began = run.swap.get("started_s", plan.swap_at_s)
    switched = run.swap.get("switched_s", began)
    before = [(r.done - r.sent) * 1e3 for r in replies if r.ok and WARMUP_S <= r.sent and r.done < began]
    around = [(r.done - r.sent) * 1e3 for r in replies if r.ok and abs(r.done - switched) <= WINDOW_S]
    loading = [(r.done - r.sent) * 1e3 for r in replies if r.ok and began <= r.done < switched]
    p99_before, p99_around = percentile(before, 99), percentile(around, 99)
    end = max((r.done for r in replies), default=0.0)
    rates = {"before": rate(replies, WARMUP_S, began), "while_loading": rate(replies, began, switched),
             "after": rate(replies, switched, end)}
    p99_ratio = ratio(p99_around, p99_before)
    quiet = [rss for at, rss in run.rss if began - WINDOW_S <= at < began]
    rss_before = int(statistics.median(quiet)) if quiet else None
    later = [rss for at, rss in run.rss if at >= began] + ([run.rss_after] if run.rss_after else [])
    rss_peak = max(later) if later else None
    rss_change = ratio(run.rss_after - rss_before, rss_before) if run.rss_after and rss_before else None
    freed = [rss for at, rss in run.rss if run.drained_at_s is not None and at >= run.drained_at_s + 1.0]
    rss_freed_loaded = int(statistics.median(freed)) if freed else None  # the old copy freed, the load still on
    seconds = max((r.done for r in replies), default=0.0)
    bounds: list[dict[str, Any]] = [
        {"bound": "0 failed requests", "value": len(failed), "met": not failed and bool(replies)},
        {"bound": f"p99 within ±{WINDOW_S:g} s of the switch <= {P99_BOUND:g}x p99 before", "value": p99_ratio,
         "met": p99_ratio is not None and p99_ratio <= P99_BOUND},
        {"bound": f"RSS after the old copy is freed within {RSS_BOUND:.0%} of before", "value": rss_change,
         "met": rss_change is not None and abs(rss_change) <= RSS_BOUND},
        {"bound": "the swap happened (200, and GET /models names the new weights)",
         "value": run.swap.get("status"), "met": swapped(run)},
    ]
    return {
        "requests": len(replies), "ok": len(replies) - len(failed), "failed": len(failed), "statuses": statuses,
        "first_errors": sorted({r.error for r in failed if r.error})[:5],
        "rps": round(len(replies) / seconds, 2) if seconds else None,
        "p50_before_ms": percentile(before, 50), "p99_before_ms": p99_before, "requests_before": len(before),
        "p99_while_loading_ms": percentile(loading, 99), "requests_while_loading": len(loading),
        "rps_before": rates["before"], "rps_while_loading": rates["while_loading"], "rps_after": rates["after"],
        "p99_around_switch_ms": p99_around, "requests_around_switch": len(around), "p99_ratio": p99_ratio,
        "swap_seconds": run.swap.get("seconds"), "swap_status": run.swap.get("status"),
        "swap_error": run.swap.get("error"), "switched_at_s": switched, "drained_after_s": run.drained_after_s,
        "freed_after_switch_s": round(run.drained_at_s - switched, 2) if run.drained_at_s is not None else None,
        "rss_before_mib": mib(rss_before), "rss_peak_mib": mib(rss_peak), "rss_after_mib": mib(run.rss_after),
        "rss_freed_under_load_mib": mib(rss_freed_loaded),
        "rss_after_vs_before": rss_change,
        "models_before": pick(run.models_before), "models_after": pick(run.models_after),
        "bounds": bounds, "met": all(b["met"] for b in bounds),
    }


def rate(replies: list[Reply], start: float, end: float) -> float | None:
    """Answers per second between ``start`` and ``end`` (seconds of the load)."""
    if end - start < 1.0:
        return None
    return round(sum(1 for r in replies if start <= r.done < end) / (end - start), 2)


def timeline(run: SwapRun) -> list[dict[str, Any]]:
    """Per second of the load (by answer time): requests, failed, p50/p99 and the median RSS."""
    last = int(max((r.done for r in run.replies), default=0.0)) + 1
    out = []
    for second in range(last):
        answered = [r for r in run.replies if second <= r.done < second + 1]
        took = [(r.done - r.sent) * 1e3 for r in answered if r.ok]
        rss = [value for at, value in run.rss if second <= at < second + 1]
        out.append({"second": second, "requests": len(answered), "failed": sum(1 for r in answered if not r.ok),
                    "p50_ms": round(percentile(took, 50), 1) if took else None,
                    "p99_ms": round(percentile(took, 99), 1) if took else None,
                    "rss_mib": mib(int(statistics.median(rss))) if rss else None})
    return out


def swapped(run: SwapRun) -> bool:
    """The PUT answered 200 and the name serves the new file now (its sha too, when it differs)."""
    after, weights = run.models_after, run.swap.get("weights")
    return run.swap.get("status") == 200 and bool(after) and after.get("weights") == weights


def pick(model: dict[str, Any]) -> dict[str, Any]:
    return {k: model.get(k) for k in ("name", "weights", "weights_sha256", "classes", "state", "change")
            if k in model}


def mib(value: int | None) -> float | None:
    return round(value / MIB, 1) if value is not None else None


def rows(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """The summary table's (what, value) rows."""

    def num(value: Any, digits: int = 1, unit: str = "") -> str:
        return "n/a" if value is None or value != value else f"{value:.{digits}f}{unit}"

    statuses = ", ".join(f"{k}: {v}" for k, v in sorted(summary["statuses"].items()))
    out = [
        ("requests ok / failed", f"{summary['ok']} / {summary['failed']}"),
        ("answers by status", statuses or "none"),
        ("requests/s before / while loading / after", f"{num(summary['rps_before'], 1)} / "
                                                      f"{num(summary['rps_while_loading'], 1)} / "
                                                      f"{num(summary['rps_after'], 1)}"),
        ("p50 / p99 before the swap", f"{num(summary['p50_before_ms'], 0)} / {num(summary['p99_before_ms'], 0)} ms "
                                      f"({summary['requests_before']} requests)"),
        (f"p99 within ±{WINDOW_S:g} s of the switch", f"{num(summary['p99_around_switch_ms'], 0)} ms "
                                                    f"({summary['requests_around_switch']} requests)"),
        ("p99 around / before", num(summary["p99_ratio"], 2, "x")),
        ("p99 while the new copy loads", f"{num(summary['p99_while_loading_ms'], 0)} ms "
                                         f"({summary['requests_while_loading']} requests)"),
        ("the swap (PUT) took", f"{num(summary['swap_seconds'], 1, ' s')} (status {summary['swap_status']})"),
        ("old copy freed after the switch", num(summary["freed_after_switch_s"], 1, " s") if
         summary["freed_after_switch_s"] is not None else f"after the load (+{num(summary['drained_after_s'], 1)} s)"),
        ("RSS before / peak / after", f"{num(summary['rss_before_mib'], 0)} / {num(summary['rss_peak_mib'], 0)} / "
                                      f"{num(summary['rss_after_mib'], 0)} MiB"),
        ("RSS after vs before", "n/a" if summary["rss_after_vs_before"] is None
         else f"{summary['rss_after_vs_before']:+.1%}"),
        ("RSS once freed, load still on (median)", num(summary["rss_freed_under_load_mib"], 0, " MiB")),
        ("weights before -> after", f"{summary['models_before'].get('weights')} -> "
                                    f"{summary['models_after'].get('weights')}"),
    ]
    out += [(b["bound"], "met" if b["met"] else "NOT MET") for b in summary["bounds"]]
    return out
