"""Detections of one device and precision against a CPU reference (GPU parity check).

    campusguard parity --write-reference ref.json                      # here, on the CPU
    campusguard parity --reference ref.json --device cuda:0 --precisions fp32,fp16   # on the GPU
    campusguard parity --reference ref.json --backend onnx --precisions int8 --calibration frames/
    campusguard parity --reference ref.json --backend openvino --precisions fp32,bf16   # OpenVINO on the CPU

A reduced precision is the model the service would serve: built (int8: calibrated on
``--calibration``, the same cached model the service finds for the same frames) and gated
against fp32; one that fails its gate is an error here, since the service would serve fp32.

Exit 1 when a precision misses the recall / precision floor, so a script notices.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from app.commands.common import imgsz_arg
from app.core.errors import ConfigError
from app.tooling.bench import report
from app.tooling.bench.args import csv_list
from app.tooling.bench.parity import as_boxes, compare

if TYPE_CHECKING:
    from app.config import Settings
    from app.inference.backends.base import Detector


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--weights", type=Path, default=Path("../shared/models/yolov8n.pt"))
    parser.add_argument("--images", type=Path, default=Path("../shared/datasets/coco-val128/images"))
    parser.add_argument("--imgsz", type=imgsz_arg, default=640)
    parser.add_argument("--device", default="cpu", help="cpu or cuda:N")
    parser.add_argument("--backend", choices=("torch", "onnx", "openvino"), default="torch")
    parser.add_argument("--precisions", type=csv_list(str, ("fp32", "fp16", "bf16", "int8")), default=["fp32"],
                        help="comma list; bf16 runs on openvino, int8 on onnx and openvino (CPU)")
    parser.add_argument("--onnx-cache-dir", type=Path, default=None,
                        help="where built models (ONNX exports, int8 models, OpenVINO IR) are cached "
                             "(default: CAMPUSGUARD_ONNX_CACHE_DIR's default, the data folder)")
    parser.add_argument("--calibration", type=Path, default=None, metavar="DIR",
                        help="int8: the calibration frames (CAMPUSGUARD_CALIBRATION_DIR); the service's frames find "
                             "the model it serves")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (0 = all cores)")
    parser.add_argument("--shapes", default="", help="more fixed shapes (CAMPUSGUARD_SHAPES)")
    parser.add_argument("--decode", choices=("reduced", "full", "device"), default="reduced",
                        help="JPEG decode: reduced when the letterbox allows (the service's default on a CPU), full, "
                             "or device (torchvision's decode_jpeg and the torch letterbox on --device, batched: "
                             "CAMPUSGUARD_DECODE=device; on a CPU it runs torchvision's CPU decode)")
    parser.add_argument("--upscale", type=int, default=None, metavar="WIDTH",
                        help="compare on camera-sized copies: each image up-scaled to WIDTH px (JPEG q90, in memory)")
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write-reference", type=Path, metavar="JSON", help="store this run's detections")
    mode.add_argument("--reference", type=Path, metavar="JSON", help="compare with stored detections")
    parser.add_argument("--min-recall", type=float, default=0.95)
    parser.add_argument("--min-precision", type=float, default=0.95)
    parser.add_argument("--out", type=Path, default=Path("results/parity"), help="results folder (compare mode)")


def detect_all(args: argparse.Namespace, precision: str) -> dict[str, list[list[float]]]:
    from app import wiring
    from app.config import Settings
    from app.inference.vision.decode import image_files

    calibration = getattr(args, "calibration", None)
    cache = getattr(args, "onnx_cache_dir", None)
    try:
        settings = Settings(_env_file=None, backend=args.backend, weights=args.weights, device=args.device,
                            imgsz=args.imgsz, precision=precision, threads=args.threads, shapes=args.shapes,
                            decode_reduce=args.decode == "reduced", decode=decoder_setting(args.decode),
                            **({"calibration_dir": calibration} if calibration is not None else {}),
                            **({"onnx_cache_dir": cache} if cache is not None else {}))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    paths = image_files(args.images)
    if not paths:
        raise ConfigError(f"no images in {args.images}")
    detector = served_detector(settings)
    pipeline = wiring.build_pipeline(settings, detector)
    from app.inference.accuracy import upscaled

    transform = upscaled(args.upscale) if args.upscale else (lambda data: data)
    detected = pipeline.detect([transform(p.read_bytes()) for p in paths])
    found = {p.name: as_boxes(dets) for p, dets in zip(paths, detected, strict=True)}  # one list per image
    detector.close()
    return found


def decoder_setting(decode: str) -> str:
    """CAMPUSGUARD_DECODE for ``--decode``: reduced and full are the host's (OpenCV) decodes, named
    explicitly so that ``auto`` on a GPU does not turn them into the device's."""
    return "device" if decode == "device" else "cpu"


def served_detector(settings: Settings) -> Detector:
    """The detector the service would serve at the settings' precision: a reduced precision that
    fails its gate is an error, not a silent fp32 (parity would compare fp32 with fp32)."""
    from app import wiring

    provisioned = wiring.provision_detector(settings)
    if provisioned.verdict is not None and provisioned.fallback:
        provisioned.detector.close()
        raise ConfigError(f"{provisioned.verdict.summary}: the service would serve fp32 instead, so there is no "
                          f"{provisioned.requested} model to compare")
    return provisioned.detector


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("YOLO_OFFLINE", "1")
    if args.write_reference is not None:
        found = detect_all(args, args.precisions[0])
        args.write_reference.parent.mkdir(parents=True, exist_ok=True)
        payload = {"meta": report.environment() | {"device": args.device, "backend": args.backend,
                                                   "precision": args.precisions[0],
                                                   "decode": args.decode, "upscale": args.upscale,
                                                   "imgsz": args.imgsz, "weights": args.weights.name},
                   "detections": found}
        report.write_json(args.write_reference, payload)
        print(f"wrote {args.write_reference}: {sum(map(len, found.values()))} boxes in {len(found)} images")
        return 0
    if not args.reference.is_file():
        raise ConfigError(f"reference not found: {args.reference} (make it with --write-reference)")
    reference = json.loads(args.reference.read_text())
    rows = []
    for precision in args.precisions:
        result = compare(reference["detections"], detect_all(args, precision), args.min_recall, args.min_precision)
        rows.append({"device": args.device, "backend": args.backend, "precision": precision, "decode": args.decode}
                    | result.as_dict())
    args.out.mkdir(parents=True, exist_ok=True)
    report.write_json(args.out / "parity.json", {"reference": reference.get("meta", {}), "rows": rows})
    table = report.markdown_table(rows, [("device", "device", 0), ("backend", "backend", 0),
                                         ("precision", "precision", 0), ("decode", "decode", 0),
                                         ("images", "images", 0),
                                         ("reference_boxes", "CPU boxes", 0), ("boxes", "boxes", 0),
                                         ("recall", "recall", 3), ("box_precision", "box precision", 3),
                                         ("mean_iou", "mean IoU", 3), ("max_conf_diff", "max conf diff", 3),
                                         ("passed", "passed", 0)])
    report.write_markdown(args.out / "parity.md", "Parity with the reference",
                          [f"Reference: {reference.get('meta', {}).get('backend', 'torch')} "
                           f"{reference.get('meta', {}).get('device', '?')} "
                           f"{reference.get('meta', {}).get('precision', '?')}; a box matches a reference box of the "
                           "same class at IoU >= 0.5.", table])
    print((args.out / "parity.md").read_text())
    return 0 if all(r["passed"] for r in rows) else 1
