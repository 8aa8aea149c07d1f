"""Export weights to a fixed-shape, simplified ONNX model with names and size in its metadata.

``--int8`` adds static int8 quantisation calibrated on your own frames, and refuses
(exit 1, no file written) when the int8 model loses more than ``--max-drop`` mAP50-95
against the fp32 one on the calibration folder's labels.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from app.commands.common import imgsz_arg
from app.core.errors import ConfigError
from app.inference.export import export_onnx
from app.inference.precision.quantize import FP32_PARTS, METHODS, Recipe


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--weights", type=Path, required=True,
                        help=".pt checkpoint or architecture .yaml (with --int8 also a YOLO fp32 .onnx export)")
    parser.add_argument("--imgsz", type=imgsz_arg, default=None,
                        help="N (square) or HxW, multiples of 32 (default 640; an .onnx input keeps its own)")
    parser.add_argument("--half", action="store_true", help="fp16 model (needs a GPU --device)")
    parser.add_argument("--batch", type=int, default=1, help="fixed batch size baked into the graph")
    parser.add_argument("--dynamic-batch", action="store_true", help="symbolic batch axis (H and W stay fixed)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--out", type=Path, required=True)
    int8 = parser.add_argument_group("int8 (CPU nodes)")
    int8.add_argument("--int8", action="store_true", help="static int8 QDQ model, calibrated and checked against fp32")
    int8.add_argument("--calibration", type=Path, default=None,
                      help="folder of your frames (or a YOLO dataset: images/, labels/, data.yaml); "
                           "default ../shared/datasets/coco-val128")
    int8.add_argument("--calib-images", type=int, default=None, help="frames used to calibrate (default: all)")
    int8.add_argument("--max-drop", type=float, default=0.01,
                      help="largest mAP50-95 loss accepted against fp32 on the folder's labels (default 0.01)")
    int8.add_argument("--eval-data", type=Path, default=None,
                      help="labelled YOLO folder to score fp32 vs int8 on (default: the calibration folder)")
    int8.add_argument("--calib-method", choices=METHODS, default=Recipe.method,
                      help=f"activation range calibration (default {Recipe.method}: the mean of each frame's range; "
                           "docs/benchmarks.md compares them)")
    int8.add_argument("--keep-fp32", default=",".join(Recipe.keep_fp32),
                      help=f"comma list of parts left in float, from {', '.join(FP32_PARTS)} "
                           f"(default {','.join(Recipe.keep_fp32)}; docs/benchmarks.md measures each)")
    int8.add_argument("--threads", type=int, default=None, help="CPU threads for calibration and evaluation")
    int8.add_argument("--no-progress", action="store_true")


def run(args: argparse.Namespace) -> int:
    if args.int8:
        return _run_int8(args)
    int8_only = [flag for flag, value in (("--calibration", args.calibration), ("--calib-images", args.calib_images),
                                          ("--eval-data", args.eval_data)) if value is not None]
    if int8_only:
        raise ConfigError(f"{', '.join(int8_only)} only apply with --int8")
    out = export_onnx(args.weights, args.out, imgsz=args.imgsz or 640, half=args.half, batch=args.batch,
                      dynamic_batch=args.dynamic_batch, device=args.device)
    print(out)
    return 0


def _run_int8(args: argparse.Namespace) -> int:
    import sys

    from app.tooling.export_int8 import DEFAULT_CALIBRATION, export_int8

    if args.half or args.device != "cpu":
        raise ConfigError("--int8 makes a CPU model: drop --half and --device")
    recipe = Recipe(method=args.calib_method,
                    keep_fp32=tuple(p.strip() for p in args.keep_fp32.split(",") if p.strip()))
    result = export_int8(args.weights, args.out, calibration=args.calibration or DEFAULT_CALIBRATION,
                         calib_images=args.calib_images, max_drop=args.max_drop, imgsz=args.imgsz, batch=args.batch,
                         dynamic_batch=args.dynamic_batch, recipe=recipe, threads=args.threads,
                         progress=not args.no_progress, eval_data=args.eval_data)
    _print_summary(result)
    if not result.accepted:
        fp32, int8 = result.fp32, result.int8
        assert fp32 is not None and int8 is not None  # refused only when both were scored
        print(f"campusguard export: refused: the int8 model loses {result.drop:.4f} mAP50-95 against fp32 "
              f"({fp32.map50_95:.4f} -> {int8.map50_95:.4f}), more than --max-drop {result.max_drop}; "
              f"no model written to {result.out}. Calibrate on more of your own frames (--calibration, "
              "--calib-images), keep more in fp32 (--keep-fp32), or accept the loss with a larger --max-drop.",
              file=sys.stderr)
        return 1
    if result.drop is None:
        print("campusguard export: warning: the calibration folder has no labels (data.yaml + labels/), so the "
              "int8 model's accuracy was not checked; run `campusguard eval` on labelled frames before serving it",
              file=sys.stderr)
    print(result.out)
    return 0


def _print_summary(result) -> None:
    from rich.console import Console
    from rich.table import Table

    from app.core.imgsz import format_imgsz

    table = Table(title=f"int8 export, imgsz {format_imgsz(result.imgsz)}, {result.calibration_images} calibration "
                        f"frames, {result.eval_images} labelled images")
    for column in ("model", "mAP50-95", "mAP50", "size MB"):
        table.add_column(column, justify="right" if column != "model" else "left")
    for name, score, size in (("fp32", result.fp32, result.fp32_bytes), ("int8", result.int8, result.int8_bytes)):
        table.add_row(name, f"{score.map50_95:.4f}" if score else "not checked",
                      f"{score.map50:.4f}" if score else "-", f"{size / 1e6:.1f}")
    if result.drop is not None:
        verdict = "accepted" if result.accepted else "REFUSED"
        table.caption = f"mAP50-95 drop {result.drop:+.4f} (limit {result.max_drop}): {verdict}"
    Console(stderr=True).print(table)
