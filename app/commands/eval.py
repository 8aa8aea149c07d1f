"""COCO mAP50-95 and mAP50 of a backend over a YOLO-format folder (images/, labels/, data.yaml)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from app import wiring
from app.commands.common import add_backend_options, settings_from_args
from app.core.errors import ConfigError
from app.core.files import atomic_write
from app.core.types import Detection
from app.inference.accuracy import EVAL_PARAMS, evaluate, load_dataset


def configure(parser: argparse.ArgumentParser) -> None:
    add_backend_options(parser)
    parser.add_argument("--data", type=Path, default=Path("../shared/datasets/coco-val128"))
    parser.add_argument("--batch", type=int, default=8, help="images per inference call")
    parser.add_argument("--per-shape", action="store_true",
                        help="also score every shape alone (all images letterboxed to it), besides the service way "
                             "(each image at its aspect's shape)")
    parser.add_argument("--decode", choices=("reduced", "full", "device"), default=None,
                        help="JPEG decode: reduced (DCT-scaled when the letterbox allows), full "
                             "(CAMPUSGUARD_DECODE_REDUCE) or device (CAMPUSGUARD_DECODE=device: torchvision on the "
                             "model's device, batched); default: the settings'")
    parser.add_argument("--upscale", type=int, default=None, metavar="WIDTH",
                        help="score camera-sized frames: each image up-scaled to WIDTH px (cubic, JPEG q90, in memory)")
    parser.add_argument("--json", action="store_true", help="print a JSON summary as the last stdout line")
    parser.add_argument("--save-predictions", type=Path, default=None, metavar="FILE",
                        help="also write every image's detections (the service way, at eval's conf 0.001, "
                             "multi-label) to FILE as JSON: compare backends or precisions box by box")
    parser.add_argument("--no-progress", action="store_true")


def run(args: argparse.Namespace) -> int:
    from app.core.imgsz import format_imgsz
    from app.inference.accuracy import upscaled

    if args.batch < 1:
        raise ConfigError(f"--batch must be >= 1, got {args.batch}")
    if args.save_predictions is not None and not args.save_predictions.parent.is_dir():
        raise ConfigError(f"--save-predictions: {args.save_predictions.parent} is not a folder")
    extra = {"decode_reduce": args.decode == "reduced", "decode": "device" if args.decode == "device" else "cpu"} \
        if args.decode else {}
    settings = settings_from_args(args, **extra)
    dataset = load_dataset(args.data)
    detector = wiring.load_detector(settings)
    pipeline = wiring.build_pipeline(settings, detector)
    transform = upscaled(args.upscale) if args.upscale else None
    runs = [("service way", None)] + ([(format_imgsz(s), s) for s in pipeline.shapes] if args.per_shape else [])
    predictions: dict[str, list] = {}

    def keep(name: str, dets: list[Detection]) -> None:
        predictions[name] = [prediction(d) for d in dets]

    saving: dict[str, Any] = {"on_image": keep} if args.save_predictions is not None else {}
    results = [(label, evaluate(pipeline, dataset, batch_size=args.batch, progress=not args.no_progress,
                                shape=shape, transform=transform, **(saving if shape is None else {})))
               for label, shape in runs]
    if args.save_predictions is not None:
        atomic_write(args.save_predictions, json.dumps({
            "backend": detector.backend, "precision": detector.precision, "conf": EVAL_PARAMS.conf,
            "iou": EVAL_PARAMS.iou, "max_det": EVAL_PARAMS.max_det, "multi_label": EVAL_PARAMS.multi_label,
            "images": predictions}).encode())
    decode = "device" if pipeline.decoder.info.decoder == "device" else "reduced" if settings.decode_reduce else "full"
    title = f"mAP on {args.data}" + (f" up-scaled to {args.upscale} px" if args.upscale else "") + \
        f", decode {decode}, precision {detector.precision}"
    table = Table(title=title)
    for col in ("shapes", "backend", "provider", "images", "boxes", "mAP50-95", "mAP50"):
        table.add_column(col)
    for label, result in results:
        table.add_row(label if shape_label(label) else f"{label}: {','.join(format_imgsz(s) for s in pipeline.shapes)}",
                      result.backend, result.provider, str(result.images), str(result.boxes),
                      f"{result.map50_95:.4f}", f"{result.map50:.4f}")
    Console(stderr=args.json).print(table)
    if args.json:
        first = results[0][1]
        summary = {k: v for k, v in asdict(first).items()
                   if k in {"backend", "provider", "images", "map50_95", "map50"}}
        summary |= {"precision": detector.precision, "decode": decode,
                    "per_shape": {label: round(r.map50_95, 4) for label, r in results[1:]}}
        print(json.dumps(summary))
    return 0


def prediction(d: Detection) -> dict:
    """One detection of ``--save-predictions``: class, score and xyxy box in the image's pixels."""
    return {"class_id": d.class_id, "class_name": d.class_name, "confidence": round(d.confidence, 5),
            "box": [round(v, 3) for v in (d.x1, d.y1, d.x2, d.y2)]}


def shape_label(label: str) -> bool:
    return label != "service way"
