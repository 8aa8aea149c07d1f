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

``--weights SIZE=PATH`` takes any weights the backend loads, an ``.onnx`` model included;
a backend row's precision is the one the Detector declares (an int8 QDQ graph says
``int8``). The table is written after every row; a row that fails is reported in place
("error: ..." or "not available on this machine: ...") and the run goes on.
"""

from __future__ import annotations

import argparse
import json
import time
from functools import partial
from pathlib import Path
from typing import Any

from app.commands.common import imgsz_arg
from app.tooling.bench import report
from app.tooling.bench.args import DEFAULT_WEIGHTS, csv_list, size_override, weights_override
from app.tooling.bench.plan import Plan, make_plan, runs, runs_ultralytics, total_steps
from app.tooling.bench.runner import Bench, load_images
from app.tooling.bench.table import add_ratios, merge, write_outputs

DEFAULT_IMAGES = Path("../shared/datasets/coco-val128/images")
SERVICE_VARIANTS = ("onnx:fp32", "onnx:int8", "openvino:fp32", "openvino:bf16", "openvino:int8", "torch:fp32")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--backends", type=csv_list(str, ("torch", "onnx", "openvino")), default=["torch", "onnx"],
                        help="comma list of torch,onnx,openvino (default torch,onnx)")
    parser.add_argument("--sizes", type=csv_list(str, tuple(DEFAULT_WEIGHTS)), default=["n", "m", "l"],
                        help="comma list of n,m,l (default n,m,l)")
    parser.add_argument("--batches", type=csv_list(int), default=[1, 4, 8, 16], help="comma list (default 1,4,8,16)")
    parser.add_argument("--batches-for", type=size_override(list), action="append", default=[], metavar="SIZE=LIST",
                        help="batch sizes for one model size, e.g. l=1,4 (repeatable)")
    parser.add_argument("--precisions", type=csv_list(str, ("fp32", "fp16", "bf16", "int8")), default=None,
                        help="default: fp32 on CPU, fp32,fp16 on a GPU; bf16 (openvino) and int8 (onnx, openvino: "
                             "built and gated as the service does) on a CPU. "
                             "A backend skips precisions it does not run")
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
    stage = parser.add_argument_group("CPU-side stages (app/tooling/bench/stages.py)")
    stage.add_argument("--stage", choices=("models", "preprocess", "postprocess", "service", "inflight"),
                       default="models",
                       help="models: the migration table (default); preprocess: decode + letterbox img/s per core "
                            "at 720p/1080p/4K; postprocess: NMS on a real (16, 84, 8400) head, host and device; "
                            "service: issue #28's ratios (servers fp32 and int8 vs bare session.run, the full-decode "
                            "loop and the Ultralytics loop) in one interleaved run; inflight: the sweep of requests "
                            "in flight (onnx, openvino) and the count auto picks, optionally through servers")
    stage.add_argument("--clients", type=int, default=4, help="concurrent HTTP clients of --stage service")
    stage.add_argument("--inflight-variants", type=csv_list(str), default=None, metavar="BACKEND:PRECISION,...",
                       help="--stage inflight: the sweep of requests in flight (1 .. cores, and auto) per variant "
                            "(default onnx:fp32,openvino:int8; a micro-batch of --clients frames)")
    stage.add_argument("--inflight-servers", action="store_true",
                       help="--stage inflight: also a server per variant at auto and at 1 in flight, --clients clients")
    stage.add_argument("--port", type=int, default=18290, help="first port of --stage service's servers")
    stage.add_argument("--server-threads", type=csv_list(int), default=None,
                       help="ONNX Runtime threads of --stage service's servers, a comma list: one server per value "
                            "and precision, all in the same rounds (default: --threads)")
    stage.add_argument("--service-variants", type=csv_list(str, SERVICE_VARIANTS), default=["onnx:fp32", "onnx:int8"],
                       help="backend:precision of --stage service's servers and bare model calls, a comma list of "
                            f"{','.join(SERVICE_VARIANTS)} (default onnx:fp32,onnx:int8)")
    stage.add_argument("--anchor", action=argparse.BooleanOptionalAction, default=None,
                       help="time the anchor in --stage service: Ultralytics predict on its own OpenVINO int8 export "
                            "at the 16:9 shape, built once into --onnx-cache-dir (default: on with the openvino extra)")
    stage.add_argument("--calibration-images", type=int, default=64, help="int8 calibration frames (--stage service)")
    stage.add_argument("--stage-seconds", type=float, default=12.0, help="seconds per stage variant set (default 12)")
    stage.add_argument("--rounds", type=int, default=6, help="interleaved rounds (default 6)")
    stage.add_argument("--stage-shapes", default="384x640,480x640,640x384",
                       help="shapes the preprocess stage routes frames to (besides --imgsz)")
    stage.add_argument("--device-decode", action=argparse.BooleanOptionalAction, default=None,
                       help="--stage preprocess: also the device decoder on --device (CAMPUSGUARD_DECODE=device, "
                            "batch 16); default: on with a GPU device, off on the CPU")
    kinds = parser.add_subparsers(dest="bench_kind", metavar="[scale]",
                                  help="`campusguard bench scale`: the event store and the rules at site scale")
    from app.commands import bench_scale

    scale = kinds.add_parser("scale", help="event store and rules at site scale",
                             description=(bench_scale.__doc__ or "").strip().splitlines()[0])
    bench_scale.configure(scale)
    scale.set_defaults(_run=bench_scale.run)


def validate(args: argparse.Namespace) -> None:
    from app.config import normalize_device
    from app.core.errors import ConfigError

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
    if getattr(args, "anchor", False) is None:  # --stage service: the anchor where OpenVINO is installed
        from app.inference.backends.auto import installed

        args.anchor = installed("openvino", "nncf")


def run(args: argparse.Namespace) -> int:
    import os
    import sys

    from tqdm import tqdm

    os.environ.setdefault("YOLO_OFFLINE", "1")
    validate(args)
    if args.stage != "models":
        from app.tooling.bench.stages import run_stage

        return run_stage(args)
    if args.render:
        saved = json.loads((args.out / "bench.json").read_text())
        saved_rows = saved["rows"]
        add_ratios(saved_rows)
        write_outputs(args.out, saved_rows, saved["meta"], plots=not args.no_plots)
        print((args.out / "bench.md").read_text())
        return 0
    plans = make_plan(args)
    images = load_images(args.images, args.max_images)
    meta = report.environment() | {"command": report.command_line("bench", sys.argv[2:]) if len(sys.argv) > 1 else "",
                                   "warmup": args.warmup, "imgsz": args.imgsz, "images_folder": str(args.images),
                                   "images_cycled": len(images)}
    saved_json = args.out / "bench.json"
    previous = json.loads(saved_json.read_text()) if args.append and saved_json.is_file() else None
    rows: list[dict[str, Any]] = []
    bar = tqdm(total=total_steps(plans, args), unit="it", disable=args.no_progress, dynamic_ncols=True)
    bench = Bench(args, images, lambda: bar.update(1))
    describe = bar.set_description_str

    def save(plots: bool) -> list[Path]:
        """Write the table as it stands (after every row, and once more with plots at the end)."""
        meta["skipped_for_time_budget"] = bench.skipped
        meta["wall_s"] = round(time.monotonic() - bench.started, 1)
        meta["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
        table, run_meta = rows, dict(meta)
        if previous is not None:
            table = merge(previous.get("rows", []), rows)
            earlier = previous.get("meta", {})
            run_meta["merged_runs"] = earlier.get("merged_runs", [earlier]) + [dict(meta)]
            run_meta["command"] = " ; ".join(run.get("command", "") for run in run_meta["merged_runs"])
        add_ratios(table)
        return write_outputs(args.out, table, run_meta, plots=plots)

    def keep(row: dict[str, Any]) -> None:
        rows.append(row)
        save(plots=False)

    def ultralytics_rows(plan: Plan) -> list[dict[str, Any]]:
        return [bench.ultralytics_row(plan, describe)]

    try:
        for plan in plans:
            if runs_ultralytics(plan, args) and not bench.out_of_time(f"{plan.size}/ultralytics/{plan.precision}"):
                bench.rows_of(partial(ultralytics_rows, plan), plan, "ultralytics", "torch", keep)
            for backend in args.backends:
                if runs(backend, plan.precision, args.device) and \
                        not bench.out_of_time(f"{plan.size}/{backend}/{plan.precision}"):
                    bench.rows_of(partial(bench.backend_rows, plan, backend, describe), plan, "library", backend,
                                  keep)
    finally:
        bar.close()
    files = save(plots=not args.no_plots)
    print((args.out / "bench.md").read_text())
    print("wrote " + ", ".join(str(f) for f in files), file=sys.stderr)
    return 0
