"""`campusguard bench --stage inflight`: how many inference requests to keep in flight.

Two measurements, each in interleaved rounds (every round gives every variant the same
slice of wall time, so load from other processes hits them alike; ratios are the medians of
the per-round ratios to one request in flight):

* **the sweep**: per backend (onnx and openvino by default), the model call on a micro-batch
  of ``--clients`` letterboxed frames with 1, 2, ... cores requests in flight, and the count
  ``CAMPUSGUARD_REQUESTS_IN_FLIGHT=0`` (auto) resolves to. The auto count must never be
  slower than one: the table says whether it is;
* **the servers** (``--inflight-servers``): a real ``campusguard serve`` per backend with
  the auto count, with 1 in flight and with the sweep's fastest count (when auto is another),
  fed by ``--clients`` concurrent HTTP clients on the same frame (issue #32: the chosen
  count >= 1.05x one request in flight).
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from app.core.imgsz import format_imgsz

DEFAULT_VARIANTS = ("onnx:fp32", "openvino:int8")


def settings_for(args, backend: str, precision: str, inflight: int):
    from app.config import Settings

    weights = Path(dict(args.weights).get("n", "../shared/models/yolov8n.pt")).resolve()
    cache = (args.onnx_cache_dir or Path(".cache/campusguard")).resolve()
    return Settings(_env_file=None, backend=backend, precision=precision, weights=weights, imgsz=args.imgsz,
                    threads=args.threads, onnx_cache_dir=cache, calibration_images=args.calibration_images,
                    requests_in_flight=inflight, warmup_iters=0)


def counts(threads: int) -> list[int]:
    return list(range(1, (threads or os.cpu_count() or 1) + 1))


def sweep(args, variant: str, frames: np.ndarray, progress: Callable[[str], None]) -> dict[str, Any]:
    """The model call on ``frames`` at each in-flight count (auto included), interleaved."""
    from app import wiring
    from app.inference.backends.registry import load_backend
    from app.inference.precision.provision import build_model

    backend, precision = variant.split(":")
    settings = settings_for(args, backend, precision, 1)
    if precision != "fp32":  # built and gated once, as the service does; then loaded again per count
        progress(f"{variant}: building and gating the {precision} model")
        wiring.provision_detector(settings, progress).detector.close()
    detectors = {}
    for count in [0, *counts(args.threads)]:
        options = replace(wiring.backend_options(settings), inflight=count)
        detectors[count] = load_backend(options) if precision == "fp32" else \
            build_model(options, wiring.precision_options(settings))
    calls = {count: det.raw_call(frames) for count, det in detectors.items()}
    order = [c for c in calls if c != 0] + [0]
    rates: dict[int, list[float]] = {c: [] for c in order}
    share = args.stage_seconds / args.rounds / len(order)
    for c in order:
        calls[c]()  # untimed: first-call allocations
    for r in range(args.rounds):
        progress(f"{variant}: round {r + 1}/{args.rounds}")
        for c in order:
            n, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < share:
                calls[c]()
                n += len(frames)
            rates[c].append(n / (time.perf_counter() - t0))
    auto = int(getattr(detectors[0], "inflight", 1))
    for det in detectors.values():
        det.close()
    ratio = {c: float(np.median(np.array(rates[c]) / np.array(rates[1]))) for c in order}
    return {"variant": variant, "batch": len(frames), "auto_count": auto,
            "img_s": {str(c if c else "auto"): round(float(np.median(rates[c])), 2) for c in order},
            "vs_one": {str(c if c else "auto"): round(ratio[c], 3) for c in order},
            "auto_not_slower": ratio[0] >= 0.97}  # within the rounds' noise of one


def server_counts(row: dict[str, Any]) -> list[tuple[str, int]]:
    """(label, setting) of the servers a sweep row asks for: auto, 1, and the sweep's fastest count
    when auto resolves to another one (so an opt-in count is measured through the server too)."""
    numeric = {int(c): r for c, r in row["vs_one"].items() if c != "auto"}
    best = max(numeric, key=numeric.__getitem__)
    extra = [(str(best), best)] if best not in (1, row["auto_count"]) else []
    return [("auto", 0), ("1", 1), *extra]


def server_env(args, backend: str, precision: str, count: int) -> dict[str, str]:
    """The environment of the server of one variant at ``count`` requests in flight, in the
    settings' own spelling (``IMGSZ`` as N or HxW: a rectangle is a tuple in ``args``)."""
    settings = settings_for(args, backend, precision, count)
    return {"CAMPUSGUARD_BACKEND": backend, "CAMPUSGUARD_PRECISION": precision,
            "CAMPUSGUARD_WEIGHTS": str(settings.weights), "CAMPUSGUARD_IMGSZ": format_imgsz(args.imgsz),
            "CAMPUSGUARD_THREADS": str(args.threads), "CAMPUSGUARD_ONNX_CACHE_DIR": str(settings.onnx_cache_dir),
            "CAMPUSGUARD_CALIBRATION_IMAGES": str(args.calibration_images),
            "CAMPUSGUARD_REQUESTS_IN_FLIGHT": str(count), "CAMPUSGUARD_WARMUP_ITERS": "2"}


def servers(args, rows: list[dict[str, Any]], frame: bytes, progress: Callable[[str], None]) -> dict[str, Any]:
    """A server per variant and count (``server_counts``), ``--clients`` clients each."""
    from app.tooling.bench.service_ratios import interleaved_rates, server_step, start_server, wait_ready

    tmp = Path(tempfile.mkdtemp(prefix="campusguard-inflight-"))
    procs, steps, port = {}, {}, args.port
    try:
        for row in rows:
            variant = row["variant"]
            backend, precision = variant.split(":")
            for label, count in server_counts(row):
                env = server_env(args, backend, precision, count)
                name = f"{variant} {label}"
                procs[name] = (f"http://127.0.0.1:{port}", start_server(env, port, tmp / f"server-{port}.log"))
                port += 1
        for name, (url, proc) in procs.items():
            progress(f"waiting for server {name}")
            wait_ready(url, proc)
            steps[name] = server_step(url, frame, args.clients)
        rates = interleaved_rates(steps, args.stage_seconds, args.rounds,
                                  lambda r: progress(f"servers: round {r + 1}/{args.rounds}"))
    finally:
        for _, proc in procs.values():
            proc.terminate()
            proc.wait(timeout=30)
    out: dict[str, Any] = {"img_s": {n: round(float(np.median(r)), 2) for n, r in rates.items()},
                           "per_round": rates, "ratios": {}}
    for row in rows:
        variant = row["variant"]
        for label, _ in server_counts(row):
            if label != "1":
                out["ratios"][f"{variant}: {label} / 1 in flight"] = round(float(np.median(
                    np.array(rates[f"{variant} {label}"]) / np.array(rates[f"{variant} 1"]))), 3)
    return out


def run_inflight(args, images: list[Path]) -> dict[str, Any]:
    import cv2

    from app.core.imgsz import input_hw
    from app.inference.vision.preprocess import letterbox, to_batch
    from app.tooling.bench.camera_frames import camera_jpegs

    variants = list(args.inflight_variants or DEFAULT_VARIANTS)
    say = (lambda _: None) if args.no_progress else (lambda m: print(m, flush=True))

    def rgb(path: Path) -> np.ndarray:
        img = cv2.imread(str(path))
        if img is None:
            raise ValueError(f"cannot read {path}")
        return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)

    boxed = [letterbox(rgb(p), input_hw(args.imgsz))[0] for p in images[:args.clients]]
    frames = to_batch(boxed)
    result: dict[str, Any] = {"sweep": [sweep(args, v, frames, say) for v in variants]}
    if args.inflight_servers:
        frame = camera_jpegs(images, (1920, 1080), count=1)[0]
        result["servers"] = servers(args, result["sweep"], frame, say)
    return result


def report_inflight(args, images: list[Path], started: list[float]) -> int:
    """Run the stage, print its tables, write ``stage-inflight.json``."""
    from rich.console import Console
    from rich.table import Table

    from app.tooling.bench import report

    result = run_inflight(args, images)
    end = [round(x, 2) for x in os.getloadavg()]
    meta = report.environment() | {"stage": "inflight", "load_average_start": started, "load_average_end": end,
                                   "seconds": args.stage_seconds, "rounds": args.rounds, "clients": args.clients,
                                   "imgsz": format_imgsz(args.imgsz), "threads": args.threads or os.cpu_count()}
    args.out.mkdir(parents=True, exist_ok=True)
    report.write_json(args.out / "stage-inflight.json", {"meta": meta} | result)
    table = Table(title=f"requests in flight: the model call on {args.clients} frames (median of {args.rounds} "
                        f"interleaved rounds; load {started} -> {end})")
    for col in ("variant", "in flight", "img/s", "vs 1 in flight"):
        table.add_column(col, justify="right" if col != "variant" else "left")
    for row in result["sweep"]:
        for count, rate in row["img_s"].items():
            label = f"auto = {row['auto_count']}" if count == "auto" else count
            table.add_row(row["variant"], label, f"{rate:.1f}", f"{row['vs_one'][count]:.3f}")
    console = Console()
    console.print(table)
    for row in result["sweep"]:
        verdict = "not slower than one" if row["auto_not_slower"] else "SLOWER than one: set REQUESTS_IN_FLIGHT=1"
        console.print(f"{row['variant']}: auto picks {row['auto_count']} in flight, {verdict}")
    if "servers" in result:
        servers_table = Table(title=f"servers, {args.clients} clients, 1080p JPEG")
        servers_table.add_column("what")
        servers_table.add_column("value", justify="right")
        for name, rate in result["servers"]["img_s"].items():
            servers_table.add_row(f"{name} in flight (img/s)", f"{rate:.1f}")
        for name, ratio in result["servers"]["ratios"].items():
            servers_table.add_row(name, f"{ratio:.3f}")
        console.print(servers_table)
    print(f"wrote {args.out / 'stage-inflight.json'}")
    return 0
