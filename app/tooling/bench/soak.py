"""Soak: N requests (default 10,000) of mixed image sizes, tracking the server's memory.

Frames from 64x64 up to 4K (3840x2160) are made once from real JPEGs (resized and
re-encoded) and posted round-robin in a seeded random order. The server's RSS (and
device memory where a GPU is used) is read from /metrics every ``--sample-every``
requests; the report gives the growth from the end of the first 10% of the run to its
end, the peak, and every error.
"""

from __future__ import annotations

import argparse
import random
from pathlib import Path
from typing import Any

import numpy as np

from app.tooling.bench import report
from app.tooling.bench.http import drive, make_client, post_image, scrape, wait_ready
from app.tooling.bench.stats import error_rate, growth, summarize, throughput

MB = 2**20
ANCHOR_SIZES = [(64, 64), (3840, 2160), (640, 480), (1920, 1080), (1280, 720), (320, 240)]


def frame_sizes(count: int, min_side: int, max_w: int, max_h: int, seed: int) -> list[tuple[int, int]]:
    """``count`` (width, height) pairs: the extremes first, then log-uniform random sizes."""
    rng = random.Random(seed)
    fixed = [(min(w, max_w), min(h, max_h)) for w, h in ANCHOR_SIZES]
    fixed = [(max(w, min_side), max(h, min_side)) for w, h in fixed]
    sizes = list(dict.fromkeys([(min_side, min_side), (max_w, max_h), *fixed]))[:count]
    while len(sizes) < count:
        w = int(round(np.exp(rng.uniform(np.log(min_side), np.log(max_w)))))
        h = int(round(np.exp(rng.uniform(np.log(min_side), np.log(max_h)))))
        sizes.append((w, h))
    return sizes


def make_frames(sources: list[bytes], sizes: list[tuple[int, int]], quality: int = 85) -> list[bytes]:
    """Resize real JPEGs to each size and re-encode them (JPEG, ``quality``)."""
    import cv2

    frames = []
    for i, (w, h) in enumerate(sizes):
        img = cv2.imdecode(np.frombuffer(sources[i % len(sources)], np.uint8), cv2.IMREAD_COLOR)
        if img is None:
            raise ValueError(f"source image {i % len(sources)} is not a decodable image")
        sized = cv2.resize(img, (w, h), interpolation=cv2.INTER_LINEAR)
        ok, buf = cv2.imencode(".jpg", sized, [cv2.IMWRITE_JPEG_QUALITY, quality])
        if not ok:
            raise RuntimeError(f"could not encode a {w}x{h} frame")
        frames.append(buf.tobytes())
    return frames


async def soak(args: argparse.Namespace, frames: list[bytes], order: list[int], bar) -> dict[str, Any]:
    samples: list[dict[str, Any]] = []
    info: dict[str, str] = {}
    results = []
    payloads = [frames[i] for i in order]
    async with make_client(args.url, args.concurrency, args.timeout, args.api_key) as client:
        await wait_ready(client, args.ready_timeout)
        for i in range(min(4, len(frames))):  # warm the server with each size class once, untimed
            await post_image(client, frames[i], args.raw_body)

        async def sample(done: int) -> None:
            s = await scrape(client)
            if s is not None:
                info.update(s.build_info)
                samples.append({"requests": done, "rss_bytes": s.rss_bytes, "vram_bytes": s.vram_bytes()})

        await sample(0)
        done = 0
        seconds = 0.0
        while done < args.requests:
            chunk = min(args.sample_every, args.requests - done)
            outcome = await drive(client, payloads, args.concurrency, requests=chunk, raw_body=args.raw_body,
                                  start_index=done, on_result=lambda _r: bar.update(1))
            results.extend(outcome.results)
            seconds += outcome.seconds
            done += chunk
            await sample(done)
            if samples and samples[-1]["rss_bytes"] is not None:
                bar.set_postfix_str(f"server RSS {samples[-1]['rss_bytes'] / MB:.0f} MB")
    return {"results": results, "samples": samples, "seconds": seconds, "server": info}


def summarize_soak(args: argparse.Namespace, run: dict[str, Any], sizes: list[tuple[int, int]],
                   order: list[int]) -> dict[str, Any]:
    results = run["results"]
    ok = [r for r in results if r.ok]
    lat = summarize([r.latency_ms for r in ok])
    rss = growth([(s["requests"], s["rss_bytes"]) for s in run["samples"] if s["rss_bytes"] is not None], args.requests)
    vram = growth([(s["requests"], s["vram_bytes"]) for s in run["samples"] if s["vram_bytes"] is not None],
                  args.requests)
    errors: dict[str, int] = {}
    for r in results:
        if not r.ok:
            key = f"{r.status} {r.error[:120]}"
            errors[key] = errors.get(key, 0) + 1
    by_size: dict[str, list[float]] = {}
    for r in ok:
        w, h = sizes[order[r.index % len(order)]]
        bucket = "<=640" if max(w, h) <= 640 else "<=1920" if max(w, h) <= 1920 else ">1920"
        by_size.setdefault(bucket, []).append(r.latency_ms)
    return {
        "requests": len(results), "ok": len(ok), "errors": len(results) - len(ok),
        "error_rate": error_rate(len(results) - len(ok), len(results)), "seconds": run["seconds"],
        "rps": throughput(len(ok), run["seconds"]), "lat_p50_ms": lat.p50, "lat_p95_ms": lat.p95,
        "lat_p99_ms": lat.p99, "lat_mean_ms": lat.mean,
        "lat_p50_by_longest_side_ms": {k: summarize(v).p50 for k, v in sorted(by_size.items())},
        "rss_baseline_mb": _mb(rss["baseline"]), "rss_end_mb": _mb(rss["end"]), "rss_growth_mb": _mb(rss["growth"]),
        "rss_peak_mb": _mb(rss["peak"]), "vram_baseline_mb": _mb(vram["baseline"]), "vram_end_mb": _mb(vram["end"]),
        "vram_growth_mb": _mb(vram["growth"]), "vram_peak_mb": _mb(vram["peak"]), "error_kinds": errors,
    }


def _mb(value: float | None) -> float | None:
    return None if value is None else value / MB


def targets(summary: dict[str, Any], max_growth_mb: float) -> list[dict[str, Any]]:
    out = []
    if summary["rss_growth_mb"] is not None:
        out.append({"target": f"server RSS growth < {max_growth_mb:.0f} MB", "value": summary["rss_growth_mb"],
                    "goal": max_growth_mb, "met": summary["rss_growth_mb"] < max_growth_mb})
    out.append({"target": "no errors", "value": float(summary["errors"]), "goal": 0.0, "met": summary["errors"] == 0})
    return out


def write_outputs(out: Path, summary: dict[str, Any], samples: list[dict[str, Any]], meta: dict[str, Any],
                  checks: list[dict[str, Any]], plots: bool) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = [report.write_json(out / "soak.json", {"meta": meta, "summary": summary, "samples": samples,
                                                   "targets": checks})]
    sample_rows = [{"requests": s["requests"], "rss_mb": _mb(s["rss_bytes"]), "vram_mb": _mb(s["vram_bytes"])}
                   for s in samples]
    files.append(report.write_csv(out / "soak.csv", sample_rows, ["requests", "rss_mb", "vram_mb"]))
    row = dict(summary)
    sizes = meta.get("frame_sizes", [])
    sections = [
        f"Measured {meta.get('time_utc', '')} on `{meta.get('host', '')}` ({meta.get('cpu_count')} CPUs, load average "
        f"{meta.get('load_average')}); server {meta.get('url')} "
        f"({', '.join(f'{k}={v}' for k, v in meta.get('server', {}).items())}).",
        f"Command: `{meta.get('command', '')}`",
        f"{len(sizes)} frame sizes from {min(sizes, default=None)} to {max(sizes, default=None)} (w, h), "
        f"concurrency {meta.get('concurrency')}; memory read from /metrics every {meta.get('sample_every')} requests. "
        "Growth = last sample minus the last sample within the first 10% of requests.",
        report.markdown_table([row], [("requests", "requests", 0), ("errors", "errors", 0), ("rps", "req/s", 2),
                                      ("lat_p50_ms", "p50 ms", 1), ("lat_p99_ms", "p99 ms", 1),
                                      ("rss_baseline_mb", "RSS at 10% MB", 1), ("rss_end_mb", "RSS end MB", 1),
                                      ("rss_growth_mb", "RSS growth MB", 1), ("rss_peak_mb", "RSS peak MB", 1),
                                      ("vram_growth_mb", "VRAM growth MB", 1)]),
        "p50 latency by longest side: " + ", ".join(f"{k}: {v:.0f} ms" for k, v in
                                                     summary["lat_p50_by_longest_side_ms"].items()),
        "## Targets",
        report.markdown_table(checks, [("target", "target", 0), ("value", "measured", 1), ("goal", "goal", 1),
                                       ("met", "met", 0)]),
    ]
    if summary["error_kinds"]:
        sections.append("Errors: " + "; ".join(f"{k} x{v}" for k, v in summary["error_kinds"].items()))
    files.append(report.write_markdown(out / "soak.md", "campusguard soak", sections))
    if plots:
        files.append(plot(out, sample_rows, summary))
    return files


def plot(out: Path, rows: list[dict[str, Any]], summary: dict[str, Any]) -> Path:
    plt = report.pyplot()
    fig, ax = plt.subplots(figsize=(7, 3.4))
    ax.plot([r["requests"] for r in rows], [r["rss_mb"] for r in rows], label="server RSS")
    if any(r["vram_mb"] is not None for r in rows):
        ax.plot([r["requests"] for r in rows], [r["vram_mb"] for r in rows], label="device memory")
    if summary["rss_baseline_mb"] is not None:
        ax.axhline(summary["rss_baseline_mb"], color="grey", linestyle=":", label="RSS at 10%")
    ax.set_xlabel("requests")
    ax.set_ylabel("MB")
    ax.set_title(f"soak: growth {summary['rss_growth_mb'] or 0:.1f} MB, {summary['errors']} errors")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = out / "soak.png"
    report.save_png(fig, path)
    plt.close(fig)
    return path


