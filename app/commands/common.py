"""Options shared by commands that load a backend."""

from __future__ import annotations

import argparse
from pathlib import Path

from app.config import Settings, load_settings
from app.core.imgsz import parse_imgsz


def imgsz_arg(value: str):
    """argparse type for --imgsz: N (square) or HxW, as CAMPUSGUARD_IMGSZ."""
    try:
        return parse_imgsz(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_backend_options(parser: argparse.ArgumentParser, weights_required: bool = False) -> None:
    parser.add_argument("--backend", choices=["torch", "onnx", "openvino"], default=None,
                        help="default: CAMPUSGUARD_BACKEND or torch (openvino: CPU, builds its IR from the .pt)")
    parser.add_argument("--weights", type=Path, default=None, required=weights_required,
                        help=".pt, .onnx or architecture .yaml (default: CAMPUSGUARD_WEIGHTS)")
    parser.add_argument("--device", default=None, help="cpu or cuda:N (default: CAMPUSGUARD_DEVICE or cpu)")
    parser.add_argument("--imgsz", type=imgsz_arg, default=None,
                        help="fixed input size: N (square) or HxW (default 640)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: all cores)")
    parser.add_argument("--precision", choices=["fp32", "fp16", "bf16", "int8"], default=None,
                        help="default: CAMPUSGUARD_PRECISION or fp32 (int8 is built from the weights and gated; "
                             "bf16: openvino on a CPU with bf16)")
    parser.add_argument("--shapes", default=None, help="more fixed shapes, comma list of HxW (CAMPUSGUARD_SHAPES)")


def settings_from_args(args: argparse.Namespace, **overrides) -> Settings:
    """Environment settings, overridden by the flags that were given."""
    given = {k: getattr(args, k) for k in ("backend", "weights", "device", "imgsz", "threads", "precision", "shapes")
             if getattr(args, k, None) is not None}
    given.update(overrides)
    return load_settings(**given)
