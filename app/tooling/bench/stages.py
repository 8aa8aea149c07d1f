"""`campusguard bench --stage preprocess|postprocess`: the CPU side of a replica, per core.

A GPU runs yolov8n at thousands of images a second; what a replica can serve is then set by
the CPU work around it. These stages time that work alone, one thread, in interleaved
rounds (each round runs every variant once, so load from other processes hits them alike):

* ``preprocess``: decode + letterbox of camera-like JPEGs (a real image up-scaled to 720p,
  1080p and 4K, quality 90), full decode against the reduced (DCT-scaled) decode, to each
  frame's aspect shape. img/s of one thread = img/s per core: docs/deploy.md's capacity plan.
  With ``--device cuda:N`` also the device decoder (CAMPUSGUARD_DECODE=device: each frame
  probed on the host, a batch of 16 decoded and letterboxed on the device, synchronised);
  ``cpu_ms_per_img`` is the process's CPU time per frame, the host's share of each variant.
* ``postprocess``: NMS and mapping of a real (16, 84, 8400) head output (yolov8n on 16
  COCO images): the per-image scan of the full head (before) against the batch compaction
  plus NMS on the survivors (after); and, with the model, the forward with the whole head
  copied back against the device-side score filter (``TorchDetector.candidates``).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from app.tooling.bench.camera_frames import camera_jpegs

RESOLUTIONS = {"720p": (1280, 720), "1080p": (1920, 1080), "4K": (3840, 2160)}


def rounds(variants: dict[str, Callable[[int], int]], seconds: float, rounds_n: int) -> dict[str, dict[str, float]]:
    """Interleaved rounds of ``seconds / rounds_n / len(variants)`` per variant; img/s per variant
    (total) and the median per-round ratio of each to the first."""
    share = seconds / rounds_n / len(variants)
    done = {name: [0, 0.0, 0.0] for name in variants}
    per_round: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(rounds_n):
        for name, step in variants.items():
            n, t0, c0, i = 0, time.perf_counter(), time.process_time(), 0
            while time.perf_counter() - t0 < share:
                n += step(i)
                i += 1
            dt = time.perf_counter() - t0
            done[name][0] += n
            done[name][1] += dt
            done[name][2] += time.process_time() - c0
            per_round[name].append(n / dt)
    first = next(iter(variants))
    return {name: {"img_s": done[name][0] / done[name][1], "ms_per_img": 1e3 * done[name][1] / max(1, done[name][0]),
                   "cpu_ms_per_img": 1e3 * done[name][2] / max(1, done[name][0]),
                   "vs_first": float(np.median(np.array(per_round[name]) / np.array(per_round[first])))}
            for name in variants}


DEVICE_BATCH = 16  # frames per device decode call in the preprocess stage (the GPU runs' batch)


def preprocess_stage(images: list[Path], shapes: tuple[tuple[int, int], ...], seconds: float,
                     rounds_n: int, device: str | None = None) -> list[dict[str, Any]]:
    from app.inference.pipeline import DecodePolicy, Pipeline

    cv2.setNumThreads(1)  # one thread: img/s per core
    shaped = type("Shapes", (), {"shapes": shapes, "imgsz": shapes[0][0], "names": {}})()
    full, reduced = Pipeline(shaped, 0, 10**9, DecodePolicy(reduce=False)), Pipeline(shaped, 0, 10**9)
    on_device = device_pipeline(shaped, device) if device is not None else None

    def prepare(pipeline: Pipeline, frames: list[bytes], i: int) -> int:
        pipeline.prepare(frames[i % len(frames)])
        return 1

    rows = []
    for label, size in RESOLUTIONS.items():
        frames = camera_jpegs(images, size)
        variants: dict[str, Callable[[int], int]] = {
            "full decode + letterbox": partial(prepare, full, frames),
            "reduced decode + letterbox": partial(prepare, reduced, frames)}
        if on_device is not None:
            variants[f"device decode + letterbox ({device}, batch {DEVICE_BATCH})"] = \
                partial(device_batch, on_device, frames)
        sample = reduced.prepare(frames[0])
        for name, result in rounds(variants, seconds, rounds_n).items():
            rows.append({"stage": "preprocess", "frames": label, "variant": name,
                         "shape": "x".join(map(str, sample.shape)),
                         "reduction": sample.reduction if "reduced" in name else 1,
                         "jpeg_kb": round(np.mean([len(f) for f in frames]) / 1024)} | result)
    return rows


def device_pipeline(shaped: Any, device: str) -> Any:
    """A pipeline over ``shaped`` whose JPEGs are decoded on ``device`` (CAMPUSGUARD_DECODE=device)."""
    import torch

    from app.inference.decoding import DecoderInfo
    from app.inference.device_decode import DeviceDecoder
    from app.inference.pipeline import Pipeline

    torch.set_num_threads(1)  # one thread, as the host variants (cv2.setNumThreads above)
    return Pipeline(shaped, 0, 10**9, decoder=DeviceDecoder(device, DecoderInfo("device", "device", device, "bench")))


def device_batch(pipeline: Any, frames: list[bytes], i: int) -> int:
    """One micro-batch as the lane sees it: each frame probed (the request thread's share), then
    one decode call and the letterbox on the device, synchronised."""
    import torch

    pending = [pipeline.prepare(frames[(i * DEVICE_BATCH + k) % len(frames)]).letterboxed for k in range(DEVICE_BATCH)]
    batch = pipeline.decoder.letterbox_batch(pending)
    if batch.device.type == "cuda":
        torch.cuda.synchronize(batch.device)
    return DEVICE_BATCH


def legacy_postprocess(head: np.ndarray, conf: float, iou: float):
    """The per-image path before compaction: argmax over all classes of every anchor."""
    from app.inference.vision.postprocess import nms, xywh_to_xyxy

    scores_all = head[4:]
    cls = scores_all.argmax(axis=0)
    scores = np.take_along_axis(scores_all, cls[None, :], axis=0)[0]
    idx = np.flatnonzero(scores > conf)
    boxes = xywh_to_xyxy(head[:4, idx].T)
    return nms(boxes, scores[idx].astype(np.float32), cls[idx].astype(np.int64), iou)


def real_head(weights: Path, images: list[Path], device: str, n: int = 16):
    """yolov8n's letterboxed batch and full head output on ``n`` real images (640x640)."""
    from app.inference.backends.torch_backend import TorchDetector
    from app.inference.vision.decode import decode_image
    from app.inference.vision.preprocess import letterbox, to_batch

    detector = TorchDetector(weights, device=device, threads=1)
    boxed = [letterbox(decode_image(p.read_bytes(), 10**9), 640)[0] for p in (images * n)[:n]]
    return detector, np.stack(boxed), detector.infer(to_batch(boxed))


def postprocess_stage(weights: Path, images: list[Path], device: str, seconds: float, rounds_n: int,
                      conf: float = 0.25, iou: float = 0.7) -> list[dict[str, Any]]:
    import torch

    from app.inference.vision.candidates import compact
    from app.inference.vision.postprocess import postprocess
    from app.inference.vision.preprocess import to_batch

    torch.set_num_threads(1)
    detector, u8, head = real_head(weights, images, device)
    n = len(head)
    host = {
        "per-image scan of the full head (before)": lambda i: ([legacy_postprocess(h, conf, iou) for h in head], n)[1],
        "batch compaction + NMS on survivors (after)": lambda i: (
            [postprocess(c, conf, iou) for c in compact(head, conf)], n)[1],
    }
    rows = [{"stage": "postprocess", "where": "host", "variant": k, "batch": n} | v
            for k, v in rounds(host, seconds, rounds_n).items()]
    floats = to_batch(list(u8))
    model = {
        "forward, whole head copied back, compaction + NMS (before)": lambda i: (
            [postprocess(c, conf, iou) for c in compact(detector.infer(floats), conf)], n)[1],
        "uint8 upload, device-side filter, NMS on survivors (after)": lambda i: (
            [postprocess(c, conf, iou) for c in detector.candidates(u8, conf)], n)[1],
    }
    rows += [{"stage": "postprocess", "where": device, "variant": k, "batch": n} | v
             for k, v in rounds(model, seconds * (1 if device != "cpu" else 2), rounds_n).items()]
    return rows


def run_stage(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from app.inference.vision.decode import image_files
    from app.inference.vision.shapes import parse_shapes
    from app.tooling.bench import report

    images = image_files(args.images)
    started = [round(x, 2) for x in os.getloadavg()]
    if args.stage == "service":
        from app.tooling.bench.service_ratios import run_service

        result = run_service(args)
        meta = report.environment() | {"stage": "service", "load_average_start": started,
                                       "load_average_end": [round(x, 2) for x in os.getloadavg()],
                                       "seconds": args.stage_seconds, "rounds": args.rounds, "clients": args.clients}
        args.out.mkdir(parents=True, exist_ok=True)
        report.write_json(args.out / "stage-service.json", {"meta": meta} | result)
        table = Table(title=f"issues #28 and #32 ratios at {result['shape']} "
                            f"(median of {args.rounds} interleaved rounds; load {started} -> "
                            f"{meta['load_average_end']})")
        table.add_column("what")
        table.add_column("value (ratios: median, per-round range)", justify="right")
        for name, rate in result["img_s"].items():
            table.add_row(f"{name} (img/s)", f"{rate:.1f}")
        for name, ratio in result["ratios"].items():
            low, high = result["ratio_ranges"][name]
            table.add_row(name, f"{ratio:.2f} ({low:.2f}-{high:.2f})")
        Console().print(table)
        print(f"wrote {args.out / 'stage-service.json'}")
        return 0
    if args.stage == "inflight":
        from app.tooling.bench.inflight import report_inflight

        return report_inflight(args, images, started)
    if args.stage == "preprocess":
        device_decode = args.device_decode if args.device_decode is not None else args.device != "cpu"
        rows = preprocess_stage(images, parse_shapes(args.stage_shapes, args.imgsz), args.stage_seconds, args.rounds,
                                args.device if device_decode else None)
    else:
        weights = Path(dict(args.weights).get("n", "../shared/models/yolov8n.pt"))
        rows = postprocess_stage(weights, images, args.device, args.stage_seconds, args.rounds)
    meta = report.environment() | {"stage": args.stage, "load_average_start": started,
                                   "load_average_end": [round(x, 2) for x in os.getloadavg()],
                                   "seconds": args.stage_seconds, "rounds": args.rounds, "threads": 1}
    args.out.mkdir(parents=True, exist_ok=True)
    report.write_json(args.out / f"stage-{args.stage}.json", {"meta": meta, "rows": rows})
    table = Table(title=f"bench --stage {args.stage} (one thread; load {started} -> {meta['load_average_end']})")
    keys = [k for k in rows[0] if k not in {"stage"}]
    for key in keys:
        table.add_column(key)
    for row in rows:
        table.add_row(*(f"{row[k]:.3f}" if isinstance(row[k], float) else str(row[k]) for k in keys))
    Console().print(table)
    print(f"wrote {args.out / f'stage-{args.stage}.json'}")
    return 0
