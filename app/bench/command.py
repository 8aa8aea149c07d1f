"""Benchmark backends x model sizes x batch sizes x precisions (the migration table).

For every combination two rows are timed after a warm-up:

* ``library`` - the Pipeline from an already-decoded RGB array: letterbox, one inference
  call for the batch, NMS and mapping back to pixels (decode excluded);
* ``raw`` - the model call alone on an already letterboxed batch (``session.run`` or the
  torch ``forward``), the ceiling the library path can reach.

Per size (and precision) one more reference row is timed: ``ultralytics``, the plain loop
people usually write, ``YOLO(weights).predict(image)`` one frame at a time. Every row
states its throughput ratio to the raw call of its backend at the same batch
(``vs_raw``) and to the Ultralytics loop (``vs_ultralytics``). Latency is per call: one
call handles ``batch`` images. Peak memory is VRAM on a GPU and process RSS on the CPU.
The raw and library rows of one batch size are timed in alternation (one raw call, one
library call, and so on), so load from other processes on a shared host hits both alike
and their ratio stays meaningful.
"""

from __future__ import annotations

import argparse
import gc
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

from app.bench import report
from app.commands.common import imgsz_arg
from app.bench.stats import ratio, summarize, throughput

DEFAULT_WEIGHTS = {"n": "../shared/models/yolov8n.pt", "m": "yolov8m.yaml", "l": "yolov8l.yaml"}
DEFAULT_IMAGES = Path("../shared/datasets/coco-val128/images")
KINDS = ("ultralytics", "raw", "library")
COLUMNS = ["device", "device_name", "size", "model", "kind", "backend", "provider", "precision", "batch",
           "iterations", "images", "seconds", "fps", "lat_p50_ms", "lat_p95_ms", "lat_p99_ms", "lat_mean_ms",
           "per_image_ms", "peak_mem_mb", "mem_source", "vs_raw", "vs_ultralytics"]


# --- argument parsing ---------------------------------------------------------------------

def csv_list(kind: type = str, choices: tuple | None = None) -> Callable[[str], list]:
    """argparse type: 'a,b,c' -> [kind(a), kind(b), kind(c)], checked against choices."""

    def parse(text: str) -> list:
        items = [item.strip() for item in text.split(",") if item.strip()]
        if not items:
            raise argparse.ArgumentTypeError("empty list")
        try:
            values = [kind(item) for item in items]
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"bad value in {text!r}: {exc}") from None
        if choices is not None:
            bad = [v for v in values if v not in choices]
            if bad:
                raise argparse.ArgumentTypeError(f"{bad} not in {list(choices)}")
        if kind is int and any(v < 1 for v in values):
            raise argparse.ArgumentTypeError("values must be >= 1")
        return values

    return parse


def size_override(kind: type) -> Callable[[str], tuple[str, Any]]:
    """argparse type: 'm=1,4' -> ('m', [1, 4]) for lists, 'm=5' -> ('m', 5) for int."""

    def parse(text: str) -> tuple[str, Any]:
        size, sep, value = text.partition("=")
        if not sep or size not in DEFAULT_WEIGHTS:
            raise argparse.ArgumentTypeError(f"expected SIZE=VALUE with SIZE in n,m,l, got {text!r}")
        if kind is list:
            return size, csv_list(int)(value)
        try:
            number = int(value)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer in {text!r}") from None
        if number < 1:
            raise argparse.ArgumentTypeError(f"expected a positive integer in {text!r}")
        return size, number

    return parse


def weights_override(text: str) -> tuple[str, str]:
    size, sep, value = text.partition("=")
    if not sep or size not in DEFAULT_WEIGHTS or not value:
        raise argparse.ArgumentTypeError(f"expected SIZE=PATH with SIZE in n,m,l, got {text!r}")
    return size, value


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backends", type=csv_list(str, ("torch", "onnx")), default=["torch", "onnx"],
                        help="comma list (default torch,onnx)")
    parser.add_argument("--sizes", type=csv_list(str, tuple(DEFAULT_WEIGHTS)), default=["n", "m", "l"],
                        help="comma list of n,m,l (default n,m,l)")
    parser.add_argument("--batches", type=csv_list(int), default=[1, 4, 8, 16], help="comma list (default 1,4,8,16)")
    parser.add_argument("--batches-for", type=size_override(list), action="append", default=[], metavar="SIZE=LIST",
                        help="batch sizes for one model size, e.g. l=1,4 (repeatable)")
    parser.add_argument("--precisions", type=csv_list(str, ("fp32", "fp16")), default=None,
                        help="default: fp32 on CPU, fp32,fp16 on a GPU")
    parser.add_argument("--iterations", type=int, default=30, help="timed iterations per row (default 30)")
    parser.add_argument("--iterations-for", type=size_override(int), action="append", default=[],
                        metavar="SIZE=N", help="timed iterations for one model size (repeatable)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed iterations before each row (default 10)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda:N (default cpu)")
    parser.add_argument("--imgsz", type=imgsz_arg, default=640, help="N (square) or HxW, as CAMPUSGUARD_IMGSZ")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads for the runtimes (0 = all cores)")
    parser.add_argument("--weights", type=weights_override, action="append", default=[], metavar="SIZE=PATH",
                        help="weights per size (default n=../shared/models/yolov8n.pt, m=yolov8m.yaml, l=yolov8l.yaml)")
    parser.add_argument("--images", type=Path, default=DEFAULT_IMAGES, help="folder of images (decoded once)")
    parser.add_argument("--max-images", type=int, default=32, help="images kept in memory and cycled")
    parser.add_argument("--references", type=csv_list(str, ("ultralytics", "raw")), default=["ultralytics", "raw"],
                        help="reference rows to time (default ultralytics,raw)")
    parser.add_argument("--onnx-cache-dir", type=Path, default=None, help="where ONNX exports are cached")
    parser.add_argument("--out", type=Path, default=Path("results/bench"), help="results folder")
    parser.add_argument("--append", action="store_true",
                        help="merge into an existing bench.json in --out (rows with the same key are replaced)")
    parser.add_argument("--time-budget", type=float, default=None, metavar="SECONDS",
                        help="start no new row after this many seconds (rows left out are listed in the report)")
    parser.add_argument("--render", action="store_true",
                        help="measure nothing: rewrite the CSV, Markdown and plots from bench.json in --out")
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--no-progress", action="store_true")


def validate(args: argparse.Namespace) -> None:
    from app.config import normalize_device
    from app.errors import ConfigError

    try:
        args.device = normalize_device(args.device)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if args.iterations < 1 or args.warmup < 0:
        raise ConfigError("--iterations must be >= 1 and --warmup >= 0")
    on_gpu = args.device != "cpu"
    if args.precisions is None:
        args.precisions = ["fp32", "fp16"] if on_gpu else ["fp32"]
    if "fp16" in args.precisions and not on_gpu:
        raise ConfigError("fp16 needs a GPU device (--device cuda:0)")


@dataclass(frozen=True)
class Plan:
    size: str
    weights: str
    precision: str
    batches: list[int]
    iterations: int


def make_plan(args: argparse.Namespace) -> list[Plan]:
    weights = dict(DEFAULT_WEIGHTS) | dict(args.weights)
    batches = dict(args.batches_for)
    iterations = dict(args.iterations_for)
    return [Plan(size, weights[size], precision, batches.get(size, args.batches), iterations.get(size, args.iterations))
            for size in args.sizes for precision in args.precisions]


def total_steps(plans: list[Plan], args: argparse.Namespace) -> int:
    """Iterations the progress bar counts (warm-up included)."""
    steps = 0
    per_row = args.warmup
    for plan in plans:
        if "ultralytics" in args.references:
            steps += per_row + plan.iterations
        for _backend in args.backends:
            kinds = 2 if "raw" in args.references else 1
            steps += kinds * len(plan.batches) * (per_row + plan.iterations)
    return steps


# --- measurement --------------------------------------------------------------------------

class PeakMemory:
    """Samples a memory reader in a background thread; ``peak`` is the largest value."""

    def __init__(self, read: Callable[[], int], interval_s: float = 0.01) -> None:
        self.read = read
        self.interval_s = interval_s
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._sample()
            self._stop.wait(self.interval_s)

    def _sample(self) -> None:
        try:
            self.peak = max(self.peak, int(self.read()))
        except Exception:  # a reader failing must not kill the benchmark
            pass

    def __enter__(self) -> "PeakMemory":
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()


def timed(step: Callable[[int], int], warmup: int, iterations: int, tick: Callable[[], None]) -> tuple[list[float], int, float]:
    """Run ``step(i)`` (returns images handled) warm-up + timed times.

    Returns per-call latencies (ms), images handled in the timed part and its wall time.
    """
    result = interleaved({"step": step}, warmup, iterations, tick)["step"]
    return result


def interleaved(steps: dict[str, Callable[[int], int]], warmup: int, iterations: int,
                tick: Callable[[], None]) -> dict[str, tuple[list[float], int, float]]:
    """Time several steps in alternation: iteration i runs each step once, in order.

    On a shared, noisy host a burst of load then hits every step alike, so their ratio is
    steadier than if each were timed in its own block. Per step: latencies (ms), images
    handled in the timed part, and the time spent in that step (the sum of its latencies).
    """
    for i in range(warmup):
        for step in steps.values():
            step(i)
            tick()
    out: dict[str, tuple[list[float], int, float]] = {name: ([], 0, 0.0) for name in steps}
    for i in range(iterations):
        for name, step in steps.items():
            t0 = time.perf_counter()
            n = step(warmup + i)
            dt = time.perf_counter() - t0
            lat, images, secs = out[name]
            lat.append(dt * 1e3)
            out[name] = (lat, images + n, secs + dt)
            tick()
    return out


def load_images(folder: Path, limit: int) -> list[np.ndarray]:
    """Decoded RGB arrays of the first ``limit`` images (sorted by name)."""
    from app.errors import ConfigError
    from app.vision.decode import decode_image, image_files

    paths = image_files(folder)
    if not paths:
        raise ConfigError(f"no images found in {folder}")
    return [decode_image(p.read_bytes(), 100_000_000) for p in paths[:limit]]


def batch_of(images: list[np.ndarray], i: int, batch: int) -> list[np.ndarray]:
    return [images[(i * batch + j) % len(images)] for j in range(batch)]


def library_step(pipeline, params, images: list[np.ndarray], batch: int) -> Callable[[int], int]:
    """The library path for one batch: letterbox, one inference call, NMS, back to pixels."""

    def library(i: int) -> int:
        prepared = [pipeline.prepare(img) for img in batch_of(images, i, batch)]
        raw = pipeline.infer([p.letterboxed for p in prepared])
        for out, p in zip(raw, prepared):
            pipeline.finish(out, p.letterbox, params)
        return batch

    return library


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
        "vs_raw": None, "vs_ultralytics": None,
    }


def row_key(row: dict[str, Any]) -> tuple:
    return (row["device"], row["size"], row["kind"], row["backend"], row["precision"], row["batch"])


def add_ratios(rows: list[dict[str, Any]]) -> None:
    """``vs_raw``: FPS over the raw call of the same backend/size/precision/batch (torch's
    for the Ultralytics loop); ``vs_ultralytics``: FPS over the Ultralytics loop of the same
    size and precision."""
    raw = {(r["device"], r["size"], r["backend"], r["precision"], r["batch"]): r["fps"] for r in rows if r["kind"] == "raw"}
    ultra = {(r["device"], r["size"], r["precision"]): r["fps"] for r in rows if r["kind"] == "ultralytics"}
    for r in rows:
        r["vs_raw"] = ratio(r["fps"], raw.get((r["device"], r["size"], r["backend"], r["precision"], r["batch"])))
        r["vs_ultralytics"] = ratio(r["fps"], ultra.get((r["device"], r["size"], r["precision"])))


class Bench:
    def __init__(self, args: argparse.Namespace, images: list[np.ndarray], tick: Callable[[], None]) -> None:
        self.args = args
        self.images = images
        self.tick = tick
        self.threads = args.threads or __import__("os").cpu_count() or 1
        self.started = time.monotonic()
        self.skipped: list[str] = []

    def out_of_time(self, what: str) -> bool:
        """True (and ``what`` is recorded as skipped) once --time-budget has been spent."""
        budget = self.args.time_budget
        if budget is not None and time.monotonic() - self.started > budget:
            self.skipped.append(what)
            return True
        return False

    # -- memory readers -------------------------------------------------------------------
    def memory_reader(self, detector=None) -> tuple[Callable[[], int], str]:
        if self.args.device == "cpu":
            import psutil

            proc = psutil.Process()
            return (lambda: proc.memory_info().rss), "rss"
        if detector is not None and detector.backend == "onnx":
            # the driver's device-wide figure (NVML / AMD SMI / sysfs): includes torch's context
            source = detector.memory().source
            return (lambda: detector.memory().used), ("rss" if source == "rss" else f"vram-{source}")
        import torch

        index = int(self.args.device.split(":")[1])
        torch.cuda.reset_peak_memory_stats(index)
        return (lambda: torch.cuda.max_memory_reserved(index)), "vram"

    # -- rows -----------------------------------------------------------------------------
    def settings(self, plan: Plan, backend: str):
        from app.config import Settings

        extra = {"onnx_cache_dir": self.args.onnx_cache_dir} if self.args.onnx_cache_dir else {}
        return Settings(backend=backend, weights=Path(plan.weights), device=self.args.device, imgsz=self.args.imgsz,
                        half=plan.precision == "fp16", threads=self.threads, **extra)

    def backend_rows(self, plan: Plan, backend: str, describe: Callable[[str], None]) -> Iterator[dict[str, Any]]:
        from app.backends import load_backend
        from app.pipeline import DetectParams, Pipeline
        from app.vision.preprocess import preprocess, stack

        describe(f"{plan.size}/{backend}/{plan.precision}: loading")
        settings = self.settings(plan, backend)
        detector = load_backend(settings)
        pipeline = Pipeline.from_settings(detector, settings)
        params = DetectParams(conf=settings.conf, iou=settings.iou, max_det=settings.max_det)
        info = detector.device_info()
        if backend == "torch":
            import torch

            torch.set_num_threads(self.threads)
        for batch in plan.batches:
            if self.out_of_time(f"{plan.size}/{backend}/{plan.precision}/batch {batch}"):
                continue
            steps: dict[str, Callable[[int], int]] = {}
            if "raw" in self.args.references:
                tensors = stack([preprocess(img, detector.imgsz)[0] for img in batch_of(self.images, 0, batch)])
                call = self.raw_call(detector, tensors)

                def raw_step(i: int, call=call, batch: int = batch) -> int:
                    call()
                    return batch

                steps["raw"] = raw_step

            steps["library"] = library_step(pipeline, params, self.images, batch)
            describe(f"{plan.size}/{backend}/{plan.precision}/b{batch}: {' + '.join(steps)}")
            read, source = self.memory_reader(detector)
            with PeakMemory(read) as mem:
                measured = interleaved(steps, self.args.warmup, plan.iterations, self.tick)
            for kind, (lat, n, secs) in measured.items():
                yield make_row(plan, kind, backend, detector.provider, self.args.device, info.name, batch,
                               lat, n, secs, mem.peak, source)
        detector.close()
        del detector, pipeline
        release_memory(self.args.device)

    def raw_call(self, detector, batch: np.ndarray) -> Callable[[], object]:
        """The model call alone: session.run, or forward on a tensor already on the device."""
        if detector.backend == "onnx":
            session, feed = detector.session, {detector.input_name: batch.astype(detector.input_dtype)}
            return lambda: session.run(None, feed)
        import torch

        x = torch.from_numpy(batch).to(detector.device)
        if detector.half:
            x = x.half()
        model, cuda = detector.model, detector.device.type == "cuda"

        def forward() -> object:
            with torch.inference_mode():
                out = model(x)
            if cuda:
                torch.cuda.synchronize(detector.device)
            return out

        return forward

    def ultralytics_row(self, plan: Plan, describe: Callable[[str], None]) -> dict[str, Any]:
        """``YOLO(weights).predict(frame)`` one frame at a time: what people usually write."""
        import torch
        from ultralytics import YOLO

        from app.devices import cpu_name

        describe(f"{plan.size}/ultralytics/{plan.precision}")
        model = YOLO(plan.weights, task="detect")
        half = plan.precision == "fp16"
        device = self.args.device
        bgr = [np.ascontiguousarray(img[:, :, ::-1]) for img in self.images]  # Ultralytics takes BGR arrays

        def step(i: int) -> int:
            model.predict(bgr[i % len(bgr)], imgsz=self.args.imgsz, device=device, half=half, verbose=False)
            if i == 0:
                torch.set_num_threads(self.threads)  # the predictor's device setup may change it
            return 1

        read, source = self.memory_reader()
        with PeakMemory(read) as mem:
            lat, n, secs = timed(step, max(self.args.warmup, 1), plan.iterations, self.tick)
        name = cpu_name() if device == "cpu" else torch.cuda.get_device_name(int(device.split(":")[1]))
        row = make_row(plan, "ultralytics", "torch", f"ultralytics-{'cpu' if device == 'cpu' else 'gpu'}", device, name,
                       1, lat, n, secs, mem.peak, source)
        del model
        release_memory(device)
        return row


def release_memory(device: str) -> None:
    gc.collect()
    if device != "cpu":
        import torch

        torch.cuda.empty_cache()
    else:
        from app.memory import trim_heap as trim_host_heap

        trim_host_heap()


# --- outputs ------------------------------------------------------------------------------

def targets(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's library-level targets, evaluated on these rows."""
    out: list[dict[str, Any]] = []
    for r in rows:
        if r["kind"] == "library" and r["backend"] == "onnx" and r["vs_raw"] is not None:
            out.append({"target": "onnx library >= 95% of raw session.run", "size": r["size"], "precision": r["precision"],
                        "batch": r["batch"], "value": r["vs_raw"], "goal": 0.95, "met": r["vs_raw"] >= 0.95})
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        if r["kind"] == "library" and r["backend"] == "onnx" and r["vs_ultralytics"] is not None:
            groups.setdefault((r["size"], r["precision"]), []).append(r)
    for (size, precision), group in groups.items():
        at1 = [r for r in group if r["batch"] == 1]
        best = max(group, key=lambda r: r["fps"])
        for label, r in (("batch 1", at1[0] if at1 else None), (f"best batch ({best['batch']})", best)):
            if r is not None:
                out.append({"target": f"onnx >= 1.3x Ultralytics predict loop, {label}", "size": size,
                            "precision": precision, "batch": r["batch"], "value": r["vs_ultralytics"], "goal": 1.3,
                            "met": r["vs_ultralytics"] >= 1.3})
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
               ("vs_ultralytics", "vs Ultralytics", 2), ("iterations", "iters", 0), ("provider", "provider", 0)]
    sections = [
        f"Measured {meta.get('time_utc', '')} on `{meta.get('host', '')}` ({meta.get('cpu_count')} CPUs, load average "
        f"{meta.get('load_average')}), torch {meta.get('torch')}, onnxruntime {meta.get('onnxruntime')}, "
        f"ultralytics {meta.get('ultralytics')}.",
        f"Command: `{meta.get('command', '')}`",
        "FPS = images/s; latency is per call (one call = `batch` images); `library` = letterbox + "
        "inference + NMS from a decoded array; `raw` = session.run / forward on a letterboxed batch; "
        "`ultralytics` = `YOLO(weights).predict(frame)` per frame. Ratios are FPS ratios.",
        report.markdown_table(rows, columns),
    ]
    if meta.get("skipped_for_time_budget"):
        sections.append("Not measured (time budget spent): " + ", ".join(meta["skipped_for_time_budget"]))
    if checks:
        sections += ["## Targets", report.markdown_table(
            checks, [("target", "target", 0), ("size", "size", 0), ("precision", "precision", 0), ("batch", "batch", 0),
                     ("value", "measured ratio", 3), ("goal", "goal", 2), ("met", "met", 0)])]
    files.append(report.write_markdown(out / "bench.md", "campusguard bench", sections))
    if plots:
        files += plot(out, rows)
    return files


def plot(out: Path, rows: list[dict[str, Any]]) -> list[Path]:
    plt = report.pyplot()
    files = []
    series: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        if r["kind"] != "ultralytics":
            series.setdefault((r["size"], r["precision"], r["backend"], r["kind"]), []).append(r)
    ultra = {(r["size"], r["precision"]): r for r in rows if r["kind"] == "ultralytics"}
    sizes = sorted({r["size"] for r in rows}, key=lambda s: "nml".find(s))
    precisions = sorted({r["precision"] for r in rows})
    for metric, label, fname in (("fps", "images/s", "bench_fps.png"), ("lat_p99_ms", "p99 latency per call (ms)",
                                                                          "bench_latency.png"),
                                 ("peak_mem_mb", "peak memory (MB)", "bench_memory.png")):
        fig, axes = plt.subplots(len(precisions), len(sizes), figsize=(4.2 * len(sizes), 3.4 * len(precisions)),
                                 squeeze=False)
        for pi, precision in enumerate(precisions):
            for si, size in enumerate(sizes):
                ax = axes[pi][si]
                for (s, p, backend, kind), group in sorted(series.items()):
                    if s != size or p != precision:
                        continue
                    group = sorted(group, key=lambda r: r["batch"])
                    ax.plot([r["batch"] for r in group], [r[metric] or 0 for r in group], marker="o",
                            linestyle="-" if kind == "library" else "--", label=f"{backend} {kind}")
                if (size, precision) in ultra and metric != "lat_p99_ms":
                    ax.axhline(ultra[(size, precision)][metric] or 0, color="grey", linestyle=":",
                               label="Ultralytics predict loop")
                ax.set_title(f"yolov8{size} {precision}")
                ax.set_xlabel("batch")
                ax.set_ylabel(label)
                ax.set_xscale("log", base=2)
                batches = sorted({r["batch"] for r in rows if r["size"] == size})
                ax.set_xticks(batches, [str(b) for b in batches])
                ax.minorticks_off()
                ax.grid(alpha=0.3)
                ax.legend(fontsize=7)
        fig.tight_layout()
        report.save_png(fig, out / fname)
        plt.close(fig)
        files.append(out / fname)
    return files


def merge(existing: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_key = {row_key(r): r for r in existing}
    by_key.update({row_key(r): r for r in new})
    return list(by_key.values())


def run(args: argparse.Namespace) -> int:
    import os
    import sys

    from tqdm import tqdm

    os.environ.setdefault("YOLO_OFFLINE", "1")
    validate(args)
    if args.render:
        saved = json.loads((args.out / "bench.json").read_text())
        rows = saved["rows"]
        add_ratios(rows)
        write_outputs(args.out, rows, saved["meta"], plots=not args.no_plots)
        print((args.out / "bench.md").read_text())
        return 0
    plans = make_plan(args)
    images = load_images(args.images, args.max_images)
    meta = report.environment() | {"command": "campusguard bench " + " ".join(sys.argv[2:]) if len(sys.argv) > 1 else "",
                                   "warmup": args.warmup, "imgsz": args.imgsz, "images_folder": str(args.images),
                                   "images_cycled": len(images)}
    rows: list[dict[str, Any]] = []
    bar = tqdm(total=total_steps(plans, args), unit="it", disable=args.no_progress, dynamic_ncols=True)
    bench = Bench(args, images, lambda: bar.update(1))
    describe = bar.set_description_str
    try:
        for plan in plans:
            if "ultralytics" in args.references and not bench.out_of_time(f"{plan.size}/ultralytics/{plan.precision}"):
                rows.append(bench.ultralytics_row(plan, describe))
            for backend in args.backends:
                if not bench.out_of_time(f"{plan.size}/{backend}/{plan.precision}"):
                    rows.extend(bench.backend_rows(plan, backend, describe))
    finally:
        bar.close()
    meta["skipped_for_time_budget"] = bench.skipped
    meta["wall_s"] = round(time.monotonic() - bench.started, 1)
    meta["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    if args.append and (args.out / "bench.json").is_file():
        previous = json.loads((args.out / "bench.json").read_text())
        rows = merge(previous.get("rows", []), rows)
        earlier = previous.get("meta", {})
        meta["merged_runs"] = earlier.get("merged_runs", [earlier]) + [dict(meta)]
        meta["command"] = " ; ".join(run.get("command", "") for run in meta["merged_runs"])
    add_ratios(rows)
    files = write_outputs(args.out, rows, meta, plots=not args.no_plots)
    print((args.out / "bench.md").read_text())
    print("wrote " + ", ".join(str(f) for f in files), file=sys.stderr)
    return 0
