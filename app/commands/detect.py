"""Detect objects in image files and print one JSON line per image (no server needed)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from app import wiring
from app.commands.common import add_backend_options, settings_from_args
from app.core.errors import ConfigError
from app.inference.pipeline import DetectParams


def configure(parser: argparse.ArgumentParser) -> None:
    add_backend_options(parser)
    parser.add_argument("images", nargs="+", type=Path)
    parser.add_argument("--conf", type=float, default=None)
    parser.add_argument("--iou", type=float, default=None)


def run(args: argparse.Namespace) -> int:
    missing = [str(p) for p in args.images if not p.is_file()]
    if missing:  # before loading the model, and an error message rather than a traceback
        raise ConfigError(f"image file not found: {', '.join(missing)}")
    settings = settings_from_args(args)
    pipeline = wiring.build_pipeline(settings)
    params = DetectParams(conf=args.conf if args.conf is not None else settings.conf,
                          iou=args.iou if args.iou is not None else settings.iou, max_det=settings.max_det)
    for path in args.images:
        dets = pipeline.detect([path.read_bytes()], params)[0]
        print(json.dumps({"image": str(path), "detections": [asdict(d) for d in dets]}))
    return 0
