"""HTTP concurrency sweep against a running server: requests/s, latency, errors, batches.

For each concurrency level the client keeps exactly that many ``POST /detect`` requests
in flight (httpx async client, real JPEGs from a folder), by duration or request count.
The server's ``campusguard_batch_size`` histogram is scraped from /metrics before and
after each level, so the report shows the micro-batch sizes the server actually formed.
The best level is compared with the library throughput: with ``--library-check N`` the
library path is timed in this process just before each level (a baseline taken under the
same host load, which matters on a shared machine), otherwise with ``--baseline bench.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

from app.tooling.bench import report
from app.tooling.bench.http import drive, make_client, post_image, scrape, wait_ready
from app.tooling.bench.stats import error_rate, ratio, summarize, throughput

DEFAULT_IMAGES = Path("../shared/datasets/coco-val128/images")
COLUMNS = ["concurrency", "requests", "ok", "errors", "error_rate", "seconds", "rps", "lat_p50_ms", "lat_p95_ms",
           "lat_p99_ms", "lat_mean_ms", "batches", "mean_batch", "batch_distribution", "library_fps", "vs_library"]


def level_row(concurrency: int, results, seconds: float, before, after) -> dict[str, Any]:
    ok = [r for r in results if r.ok]
    lat = summarize([r.latency_ms for r in ok])
    statuses: dict[str, int] = {}
    for r in results:
        statuses[str(r.status)] = statuses.get(str(r.status), 0) + 1
    row: dict[str, Any] = {
        "concurrency": concurrency, "requests": len(results), "ok": len(ok), "errors": len(results) - len(ok),
        "error_rate": error_rate(len(results) - len(ok), len(results)), "seconds": seconds,
        "rps": throughput(len(ok), seconds), "lat_p50_ms": lat.p50, "lat_p95_ms": lat.p95, "lat_p99_ms": lat.p99,
        "lat_mean_ms": lat.mean, "statuses": statuses,
        "first_errors": sorted({r.error for r in results if not r.ok})[:3],
        "batches": None, "mean_batch": None, "batch_distribution": None, "batch_buckets": None,
    }
    if before is not None and after is not None:
        diff = after.batch.minus(before.batch)
        row["batches"] = int(diff.count)
        row["mean_batch"] = diff.mean()
        row["batch_buckets"] = diff.distribution()
        row["batch_distribution"] = " ".join(f"{k}:{v}" for k, v in row["batch_buckets"].items())
    return row


def baseline_fps(path: Path, backend: str | None, batch: int) -> tuple[float | None, dict[str, Any] | None]:
    """Library FPS of ``backend`` (yolov8n, fp32, ``batch``) from a bench.json."""
    rows = json.loads(Path(path).read_text()).get("rows", [])
    candidates = [r for r in rows if r["kind"] == "library" and r["size"] == "n" and r["precision"] == "fp32"
                  and (backend is None or r["backend"] == backend)]
    exact = [r for r in candidates if r["batch"] == batch]
    if not exact:
        return None, None
    return exact[0]["fps"], exact[0]


def targets(rows: list[dict[str, Any]], library_fps: float | None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    ok_rows = [r for r in rows if r["ok"]]
    best = max(ok_rows, key=lambda r: r["rps"]) if ok_rows else None
    reference = (best.get("library_fps") or library_fps) if best else None
    if best and reference:
        value = ratio(best["rps"], reference)
        where = "measured just before this level" if best.get("library_fps") else "from --baseline"
        out.append({"target": "server end-to-end at best concurrency >= 90% of library FPS",
                    "detail": f"{best['rps']:.2f} req/s at c={best['concurrency']} vs library {reference:.2f} img/s "
                              f"({where})",
                    "value": value, "goal": 0.9, "met": value is not None and value >= 0.9})
    by_c = {r["concurrency"]: r for r in ok_rows}
    if 1 in by_c and 16 in by_c and by_c[16].get("mean_batch"):
        bound = micro_batch_bound(by_c[1]["lat_p99_ms"], by_c[16]["mean_batch"])
        value = ratio(by_c[16]["lat_p99_ms"], by_c[1]["lat_p99_ms"] * by_c[16]["mean_batch"])
        out.append({"target": "p99(c=16) <= 1.5 x p99(c=1) x mean batch at c=16",
                    "detail": f"p99 c16 {by_c[16]['lat_p99_ms']:.0f} ms vs bound {bound:.0f} ms "
                              f"(p99 c1 {by_c[1]['lat_p99_ms']:.0f} ms, mean batch {by_c[16]['mean_batch']:.2f})",
                    "value": value, "goal": 1.5, "met": value is not None and value <= 1.5})
    errors = sum(r["errors"] for r in rows)
    out.append({"target": "no errors", "detail": f"{errors} failed of {sum(r['requests'] for r in rows)}",
                "value": float(errors), "goal": 0.0, "met": errors == 0})
    return out


def micro_batch_bound(p99_c1_ms: float, batch: float, factor: float = 1.5) -> float:
    """The micro-batching latency budget: ``factor`` x p99 at concurrency 1 x batch size."""
    return factor * p99_c1_ms * batch


async def sweep(args: argparse.Namespace, payloads: list[bytes], bar) -> tuple[list[dict[str, Any]], dict[str, str]]:
    rows: list[dict[str, Any]] = []
    async with make_client(args.url, max(args.concurrency), args.timeout, args.api_key) as client:
        await wait_ready(client, args.ready_timeout)
        for i in range(args.warmup):
            await post_image(client, payloads[i % len(payloads)], args.raw_body)
        first = await scrape(client)
        info = first.build_info if first else {}
        check = library_check(args, info) if args.library_check else None
        start_index = args.warmup
        for concurrency in args.concurrency:
            library_fps = None
            if check is not None:
                bar.set_description_str(f"library check before c={concurrency}")
                library_fps = check()
            bar.set_description_str(f"concurrency {concurrency}")
            before = await scrape(client)
            info = (before.build_info if before else info) or info
            ticker = None
            if args.requests is None:
                ticker = asyncio.create_task(_tick_seconds(bar, args.duration))
            outcome = await drive(client, payloads, concurrency, requests=args.requests, duration=args.duration,
                                  raw_body=args.raw_body, start_index=start_index,
                                  on_result=(lambda _r: bar.update(1)) if args.requests is not None else None)
            if ticker is not None:
                await ticker
            after = await scrape(client)
            start_index += len(outcome.results)
            row = level_row(concurrency, outcome.results, outcome.seconds, before, after)
            row["library_fps"] = library_fps
            row["vs_library"] = ratio(row["rps"], library_fps)
            rows.append(row)
    return rows, info


def library_check(args: argparse.Namespace, info: dict[str, str]) -> Callable[[], float]:
    """A callable timing ``--library-check`` library-path calls; returns images/s."""
    from app import wiring
    from app.config import Settings
    from app.inference.pipeline import DetectParams
    from app.tooling.bench.runner import library_step, load_images
    from app.tooling.bench.timing import timed

    extra = {"onnx_cache_dir": args.onnx_cache_dir} if args.onnx_cache_dir else {}
    settings = Settings(backend=info.get("backend", "onnx"), weights=args.library_weights,
                        device=info.get("device", "cpu"),
                        imgsz=info.get("imgsz", 640), threads=args.threads, **extra)
    pipeline = wiring.build_pipeline(settings)
    params = DetectParams(conf=settings.conf, iou=settings.iou, max_det=settings.max_det)
    step = library_step(pipeline, params, load_images(args.images, 32), args.baseline_batch)
    step(0)  # warm-up

    def measure() -> float:
        _lat, images, seconds = timed(step, 0, args.library_check, lambda: None)
        return throughput(images, seconds)

    return measure


async def _tick_seconds(bar, seconds: float) -> None:
    whole = int(math.ceil(seconds))
    for _ in range(whole):
        await asyncio.sleep(seconds / whole)
        bar.update(1)


def write_outputs(out: Path, rows: list[dict[str, Any]], meta: dict[str, Any], checks: list[dict[str, Any]],
                  plots: bool) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    files = [report.write_json(out / "loadtest.json", {"meta": meta, "rows": rows, "targets": checks}),
             report.write_csv(out / "loadtest.csv", rows, COLUMNS)]
    info = meta.get("server", {})
    sections = [
        f"Measured {meta.get('time_utc', '')} on `{meta.get('host', '')}` ({meta.get('cpu_count')} CPUs, load average "
        f"{meta.get('load_average')}); server {meta.get('url')} ({', '.join(f'{k}={v}' for k, v in info.items())}).",
        f"Command: `{meta.get('command', '')}`",
        "Latency is per request, end to end (multipart upload, decode, queue, inference, NMS, JSON). "
        "Batches: micro-batches the server formed during the level (from `campusguard_batch_size`).",
        report.markdown_table(rows, [("concurrency", "concurrency", 0), ("requests", "requests", 0),
                                     ("rps", "req/s", 2), ("lat_p50_ms", "p50 ms", 1), ("lat_p95_ms", "p95 ms", 1),
                                     ("lat_p99_ms", "p99 ms", 1), ("error_rate", "error rate", 3),
                                     ("batches", "batches", 0), ("mean_batch", "mean batch", 2),
                                     ("batch_distribution", "batch sizes (size:count)", 0),
                                     ("library_fps", "library img/s", 2), ("vs_library", "vs library", 2)]),
    ]
    if checks:
        sections += ["## Targets", report.markdown_table(checks, [("target", "target", 0), ("detail", "measured", 0),
                                                                  ("value", "ratio", 3), ("goal", "goal", 2),
                                                                  ("met", "met", 0)])]
    files.append(report.write_markdown(out / "loadtest.md", "campusguard loadtest", sections))
    if plots:
        files += plot(out, rows)
    return files


def plot(out: Path, rows: list[dict[str, Any]]) -> list[Path]:
    plt = report.pyplot()
    fig, (ax1, ax2, ax3) = plt.subplots(1, 3, figsize=(13, 3.6))
    c = [r["concurrency"] for r in rows]
    ax1.plot(c, [r["rps"] for r in rows], marker="o")
    ax1.set_title("throughput")
    ax1.set_ylabel("requests/s")
    for key, label in (("lat_p50_ms", "p50"), ("lat_p95_ms", "p95"), ("lat_p99_ms", "p99")):
        ax2.plot(c, [r[key] for r in rows], marker="o", label=label)
    ax2.set_title("latency")
    ax2.set_ylabel("ms")
    ax2.legend()
    labels = []
    for r in rows:
        for k in (r.get("batch_buckets") or {}):
            if k not in labels:
                labels.append(k)
    bottom = [0.0] * len(rows)
    for label in labels:
        values = [float((r.get("batch_buckets") or {}).get(label, 0)) for r in rows]
        ax3.bar([str(x) for x in c], values, bottom=bottom, label=f"batch {label}")
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    ax3.set_title("micro-batches formed")
    ax3.set_ylabel("batches")
    if labels:
        ax3.legend(fontsize=7)
    for ax in (ax1, ax2, ax3):
        ax.set_xlabel("concurrency")
        ax.grid(alpha=0.3)
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
    fig.tight_layout()
    path = out / "loadtest.png"
    report.save_png(fig, path)
    plt.close(fig)
    return [path]


