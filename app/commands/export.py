"""Export weights to a fixed-shape, simplified ONNX model with names and size in its metadata."""

from __future__ import annotations

import argparse
from pathlib import Path

from app.commands.common import imgsz_arg
from app.export import export_onnx


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--weights", type=Path, required=True, help=".pt checkpoint or architecture .yaml")
    parser.add_argument("--imgsz", type=imgsz_arg, default=640, help="N (square) or HxW, multiples of 32")
    parser.add_argument("--half", action="store_true", help="fp16 model (needs a GPU --device)")
    parser.add_argument("--batch", type=int, default=1, help="fixed batch size baked into the graph")
    parser.add_argument("--dynamic-batch", action="store_true", help="symbolic batch axis (H and W stay fixed)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, required=True)


def run(args: argparse.Namespace) -> int:
    out = export_onnx(args.weights, args.out, imgsz=args.imgsz, half=args.half, batch=args.batch,
                      dynamic_batch=args.dynamic_batch, device=args.device)
    print(out)
    return 0
