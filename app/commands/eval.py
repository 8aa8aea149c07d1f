"""COCO mAP50-95 and mAP50 of a backend over a YOLO-format folder (images/, labels/, data.yaml)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from rich.console import Console
from rich.table import Table

from app import wiring
from app.commands.common import add_backend_options, settings_from_args
from app.core.errors import ConfigError
from app.inference.accuracy import evaluate, load_dataset


def configure(parser: argparse.ArgumentParser) -> None:
    add_backend_options(parser)
    parser.add_argument("--data", type=Path, default=Path("../shared/datasets/coco-val128"))
    parser.add_argument("--batch", type=int, default=8, help="images per inference call")
    parser.add_argument("--json", action="store_true", help="print a JSON summary as the last stdout line")
    parser.add_argument("--no-progress", action="store_true")


def run(args: argparse.Namespace) -> int:
    if args.batch < 1:
        raise ConfigError(f"--batch must be >= 1, got {args.batch}")
    settings = settings_from_args(args)
    dataset = load_dataset(args.data)
    detector = wiring.load_detector(settings)
    result = evaluate(wiring.build_pipeline(settings, detector), dataset,
                      batch_size=args.batch, progress=not args.no_progress)
    table = Table(title=f"mAP on {args.data}")
    for col in ("backend", "provider", "images", "boxes", "mAP50-95", "mAP50"):
        table.add_column(col)
    table.add_row(result.backend, result.provider, str(result.images), str(result.boxes),
                  f"{result.map50_95:.4f}", f"{result.map50:.4f}")
    Console(stderr=args.json).print(table)
    if args.json:
        summary = {k: v for k, v in asdict(result).items() if k in {"backend", "provider", "images", "map50_95", "map50"}}
        print(json.dumps(summary))
    return 0
