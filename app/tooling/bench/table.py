"""The bench table: one row per measurement, ratios between rows, targets, written files.

Rows are written as they complete (``checkpoint``), so a row that fails (out of memory, a
compile error) or a run cut short keeps everything measured before it.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from app.tooling.bench import report
from app.tooling.bench.stats import ratio, summarize, throughput

if TYPE_CHECKING:
    from app.tooling.bench.plan import Plan

KINDS = ("ultralytics", "raw", "library")

COLUMNS = ["device", "device_name", "size", "model", "kind", "backend", "provider", "precision", "batch",
           "iterations", "images", "seconds", "fps", "lat_p50_ms", "lat_p95_ms", "lat_p99_ms", "lat_mean_ms",
           "per_image_ms", "peak_mem_mb", "mem_source", "vs_raw", "vs_ultralytics", "vs_onnx_fp32", "status"]
NOT_AVAILABLE = "not available on this machine"
MEASURED = ("lat_p50_ms", "lat_p95_ms", "lat_p99_ms", "lat_mean_ms", "per_image_ms", "peak_mem_mb")


def make_row(plan: Plan, kind: str, backend: str, provider: str, device: str, device_name: str, batch: int,
             latencies: list[float], images: int, seconds: float, peak_bytes: int, mem_source: str) -> dict[str, Any]:
    lat = summarize(latencies)
    fps = throughput(images, seconds)
    return {
        "device": device, "device_name": device_name, "size": plan.size, "model": Path(plan.weights).stem,
        "kind": kind, "backend": backend, "provider": provider, "precision": plan.precision, "batch": batch,
        "iterations": len(latencies), "images": images, "seconds": seconds, "fps": fps,
        "lat_p50_ms": lat.p50, "lat_p95_ms": lat.p95, "lat_p99_ms": lat.p99, "lat_mean_ms": lat.mean,
        "per_image_ms": (1e3 / fps) if fps else None,
        "peak_mem_mb": peak_bytes / 2**20 if peak_bytes else None, "mem_source": mem_source,
        "vs_raw": None, "vs_ultralytics": None, "vs_onnx_fp32": None, "status": "ok",
    }


def error_row(plan, kind: str, backend: str, device: str, exc: BaseException) -> dict[str, Any]:
    """The row a failure leaves: what was asked for, why it did not run, no figures.

    Settings, device and missing-package errors mean the machine cannot run that row
    (ONNX on CUDA without onnxruntime-gpu, no ultralytics): "not available on this machine".
    """
    from pydantic import ValidationError

    from app.core.errors import ServiceError

    unavailable = isinstance(exc, (ServiceError, ImportError, ValidationError))
    text = getattr(exc, "message", None) or str(exc)
    message = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
    status = f"{NOT_AVAILABLE}: {message}" if unavailable else f"error: {type(exc).__name__}: {message}"
    return {"device": device, "device_name": "", "size": plan.size, "model": Path(plan.weights).stem, "kind": kind,
            "backend": backend, "provider": "", "precision": plan.precision, "batch": 0, "iterations": 0, "images": 0,
            "seconds": 0.0, "fps": None, **{k: None for k in MEASURED}, "mem_source": "", "vs_raw": None,
            "vs_ultralytics": None, "vs_onnx_fp32": None, "status": status}


def row_key(row: dict[str, Any]) -> tuple:
    return (row["device"], row["size"], row["kind"], row["backend"], row["precision"], row["batch"])


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """``vs_raw``: FPS over the raw call of the same backend/size/precision/batch (torch's
    for the Ultralytics loop); ``vs_ultralytics``: FPS over the Ultralytics loop of the same
    size and precision; ``vs_onnx_fp32``: FPS over the onnx backend's fp32 row of the same kind,
    size and batch (how far another runtime or precision moves the CPU default, issue #32)."""
    for r in rows:
        r.setdefault("status", "ok")  # tables written before rows had a status
    raw = {(r["device"], r["size"], r["backend"], r["precision"], r["batch"]): r["fps"]
           for r in rows if r["kind"] == "raw"}
    ultra = {(r["device"], r["size"], r["precision"]): r["fps"] for r in rows if r["kind"] == "ultralytics"}
    onnx = {(r["device"], r["size"], r["kind"], r["batch"]): r["fps"] for r in rows
            if r["backend"] == "onnx" and r["precision"] == "fp32" and r["kind"] != "ultralytics"}
    for r in rows:
        r["vs_raw"] = ratio(r["fps"], raw.get((r["device"], r["size"], r["backend"], r["precision"], r["batch"])))
        r["vs_ultralytics"] = ratio(r["fps"], ultra.get((r["device"], r["size"], r["precision"])))
        r["vs_onnx_fp32"] = ratio(r["fps"], onnx.get((r["device"], r["size"], r["kind"], r["batch"])))


def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's library-level targets, evaluated on these rows."""
    out: list[dict[str, Any]] = []
    for r in rows:
        if r["kind"] == "library" and r["backend"] == "onnx" and r["vs_raw"] is not None:
            out.append({"target": "onnx library >= 95% of raw session.run", "size": r["size"],
                        "precision": r["precision"], "batch": r["batch"], "value": r["vs_raw"], "goal": 0.95,
                        "met": r["vs_raw"] >= 0.95})
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        if r["kind"] == "library" and r["backend"] == "onnx" and r["vs_ultralytics"] is not None:
            groups.setdefault((r["size"], r["precision"]), []).append(r)
    for (size, precision), group in groups.items():
        at1 = [r for r in group if r["batch"] == 1]
        best = max(group, key=lambda r: r["fps"])
        for label, chosen in (("batch 1", at1[0] if at1 else None), (f"best batch ({best['batch']})", best)):
            if chosen is not None:
                out.append({"target": f"onnx >= 1.3x Ultralytics predict loop, {label}", "size": size,
                            "precision": precision, "batch": chosen["batch"], "value": chosen["vs_ultralytics"],
                            "goal": 1.3, "met": chosen["vs_ultralytics"] >= 1.3})
    return out


def write_outputs(out: Path, rows: list[dict[str, Any]], meta: dict[str, Any], plots: bool) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    rows = sorted(rows, key=lambda r: ({"n": 0, "m": 1, "l": 2}.get(r["size"], 9), r["device"], r["precision"],
                                       KINDS.index(r["kind"]), r["backend"], r["batch"]))
    checks = targets(rows)
    files = [report.write_json(out / "bench.json", {"meta": meta, "rows": rows, "targets": checks}),
             report.write_csv(out / "bench.csv", rows, COLUMNS)]
    on_gpu = any(str(r["mem_source"]).startswith("vram") for r in rows)
    columns = [("device_name", "device", 0), ("size", "size", 0), ("kind", "path", 0), ("backend", "backend", 0),
               ("precision", "precision", 0), ("batch", "batch", 0), ("fps", "FPS", 1), ("lat_p50_ms", "p50 ms", 1),
               ("lat_p95_ms", "p95 ms", 1), ("lat_p99_ms", "p99 ms", 1),
               ("peak_mem_mb", "peak VRAM MB" if on_gpu else "peak RSS MB", 0), ("vs_raw", "vs raw", 2),
               ("vs_ultralytics", "vs Ultralytics", 2), ("vs_onnx_fp32", "vs onnx fp32", 2), ("iterations", "iters", 0),
               ("provider", "provider", 0)]
    sections = [
        f"Measured {meta.get('time_utc', '')} on `{meta.get('host', '')}` ({meta.get('cpu_count')} CPUs, load average "
        f"{meta.get('load_average')}), torch {meta.get('torch')}, onnxruntime {meta.get('onnxruntime')}, "
        f"ultralytics {meta.get('ultralytics')}.",
        f"Command: `{meta.get('command', '')}`",
        "FPS = images/s; latency is per call (one call = `batch` images); `library` = letterbox + "
        "inference + NMS from a decoded array; `raw` = session.run / forward on a letterboxed batch; "
        "`ultralytics` = `YOLO(weights).predict(frame)` per frame. Ratios are FPS ratios.",
        report.markdown_table([r for r in rows if r["status"] == "ok"], columns),
    ]
    failed = [r for r in rows if r["status"] != "ok"]
    if failed:
        sections += ["## Rows that did not run", report.markdown_table(
            failed, [("size", "size", 0), ("kind", "path", 0), ("backend", "backend", 0),
                     ("precision", "precision", 0), ("status", "status", 0)])]
    if meta.get("skipped_for_time_budget"):
        sections.append("Not measured (time budget spent): " + ", ".join(meta["skipped_for_time_budget"]))
    if checks:
        sections += ["## Targets", report.markdown_table(
            checks, [("target", "target", 0), ("size", "size", 0), ("precision", "precision", 0), ("batch", "batch", 0),
                     ("value", "measured ratio", 3), ("goal", "goal", 2), ("met", "met", 0)])]
    files.append(report.write_markdown(out / "bench.md", "campusguard bench", sections))
    if plots:
        from app.tooling.bench.plots import plot

        files += plot(out, [r for r in rows if r["status"] == "ok"])
    return files


def merge(existing: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_key = {row_key(r): r for r in existing}
    by_key.update({row_key(r): r for r in new})
    return list(by_key.values())
