"""Runs the bench plan: loads each backend, times its rows, hands each row on as it completes."""

from __future__ import annotations

import argparse
import gc
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from app.tooling.bench.plan import Plan
from app.tooling.bench.table import error_row, make_row
from app.tooling.bench.timing import PeakMemory, interleaved, timed


def load_images(folder: Path, limit: int) -> list[np.ndarray]:
    """Decoded RGB arrays of the first ``limit`` images (sorted by name)."""
    from app.core.errors import ConfigError
    from app.inference.vision.decode import decode_image, image_files

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
        raw = pipeline.infer([p.letterboxed for p in prepared], params.conf)
        for out, p in zip(raw, prepared, strict=True):  # one output per image (padding trimmed)
            pipeline.finish(out, p.letterbox, params)
        return batch

    return library


class Bench:
    def __init__(self, args: argparse.Namespace, images: list[np.ndarray], tick: Callable[[], None]) -> None:
        self.args = args
        self.images = images
        self.tick = tick
        self.threads = args.threads or os.cpu_count() or 1
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
        """A reader from ``app.inference.devices``, sampled for its peak: RSS on the CPU, the detector's
        own figure on a GPU (torch's reserved bytes; the driver's device-wide figure, NVML /
        AMD SMI / sysfs, for ONNX), torch's for the Ultralytics loop."""
        from app.inference.devices import parse_device, process_memory, torch_memory

        if self.args.device == "cpu":
            return (lambda: process_memory().used), "rss"
        if detector is not None:
            source = detector.memory().source
            return (lambda: detector.memory().reserved), ("rss" if source == "rss" else f"vram-{source}")
        index = parse_device(self.args.device) or 0
        return (lambda: torch_memory(index).reserved), "vram-torch"

    # -- rows -----------------------------------------------------------------------------
    def settings(self, plan: Plan, backend: str):
        from app.config import Settings

        extra = {"onnx_cache_dir": self.args.onnx_cache_dir} if self.args.onnx_cache_dir else {}
        return Settings(backend=backend, weights=Path(plan.weights), device=self.args.device, imgsz=self.args.imgsz,
                        precision=plan.precision, threads=self.threads, **extra)

    def backend_rows(self, plan: Plan, backend: str, describe: Callable[[str], None]) -> Iterator[dict[str, Any]]:
        from app import wiring
        from app.inference.pipeline import DetectParams
        from app.inference.vision.preprocess import preprocess, stack

        describe(f"{plan.size}/{backend}/{plan.precision}: loading")
        settings = self.settings(plan, backend)
        detector = wiring.load_detector(settings)
        pipeline = wiring.build_pipeline(settings, detector)
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
                call = detector.raw_call(tensors)

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
                row = make_row(plan, kind, backend, detector.provider, self.args.device, info.name, batch,
                               lat, n, secs, mem.peak, source)
                yield row | {"precision": detector.precision}  # the graph's own (an int8 .onnx says int8)
        detector.close()
        del detector, pipeline
        release_memory(self.args.device)

    def ultralytics_row(self, plan: Plan, describe: Callable[[str], None]) -> dict[str, Any]:
        """``YOLO(weights).predict(frame)`` one frame at a time: what people usually write."""
        import torch
        from ultralytics import YOLO

        from app.inference.devices import cpu_name

        describe(f"{plan.size}/ultralytics/{plan.precision}")
        model = YOLO(plan.weights, task="detect")
        half = plan.precision == "fp16"
        device = self.args.device
        bgr = [np.ascontiguousarray(img[:, :, ::-1]) for img in self.images]  # Ultralytics takes BGR arrays

        def step(i: int, model: YOLO = model) -> int:
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
        del model, step  # drop the model (step's default holds it too) before the next row
        release_memory(device)
        return row


    def rows_of(self, produce: Callable[[], Iterable[dict[str, Any]]], plan: Plan, kind: str, backend: str,
                keep: Callable[[dict[str, Any]], None]) -> None:
        """Hand each row to ``keep`` as it completes; a failure becomes a row too.

        One row failing (out of memory, a compile error, a runtime this machine lacks) must
        not lose the table: what was measured stays, the failure is reported in its place.
        """
        try:
            for row in produce():
                keep(row)
        except Exception as exc:  # noqa: BLE001 - any failure of one row is reported, not raised
            keep(error_row(plan, kind, backend, self.args.device, exc))
            release_memory(self.args.device)


def release_memory(device: str) -> None:
    gc.collect()
    if device != "cpu":
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    else:
        from app.core.memory import trim_heap as trim_host_heap

        trim_host_heap()
