"""`campusguard loadtest`: HTTP concurrency sweep against a running server: requests/s, latency, errors, batches.

The measuring lives in ``app.tooling.bench.loadtest``; this module is its command line.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import sys
from pathlib import Path

from app.core.redact import redact_url
from app.tooling.bench import report
from app.tooling.bench.args import csv_list
from app.tooling.bench.http import load_jpegs
from app.tooling.bench.loadtest import DEFAULT_IMAGES, baseline_fps, sweep, targets, write_outputs


def add_client_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="server base URL")
    parser.add_argument("--images", type=Path, default=DEFAULT_IMAGES, help="folder of JPEG files to post")
    parser.add_argument("--api-key", default=os.environ.get("CAMPUSGUARD_BENCH_API_KEY"),
                        help="sent as X-API-Key (default: $CAMPUSGUARD_BENCH_API_KEY)")
    parser.add_argument("--raw-body", action="store_true", help="post image/jpeg bodies instead of multipart")
    parser.add_argument("--timeout", type=float, default=60.0, help="per-request timeout in seconds")
    parser.add_argument("--ready-timeout", type=float, default=60.0, help="wait this long for /health/ready")
    parser.add_argument("--no-plots", action="store_true")
    parser.add_argument("--no-progress", action="store_true")


def configure(parser: argparse.ArgumentParser) -> None:
    add_client_options(parser)
    parser.add_argument("--concurrency", type=csv_list(int), default=[1, 2, 4, 8, 16, 32],
                        help="comma list of levels (default 1,2,4,8,16,32)")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--duration", type=float, default=None, help="seconds per level (default 20)")
    mode.add_argument("--requests", type=int, default=None, help="requests per level instead of a duration")
    parser.add_argument("--warmup", type=int, default=4, help="untimed requests before the sweep (default 4)")
    parser.add_argument("--baseline", type=Path, default=None, help="bench.json to compare throughput with")
    parser.add_argument("--baseline-batch", type=int, default=8,
                        help="library row (batch size) of the baseline to compare with (default 8, the server's "
                             "default max batch)")
    parser.add_argument("--library-check", type=int, default=0, metavar="N",
                        help="before each level, time N library-path calls (batch --baseline-batch, the server's "
                             "backend and imgsz) in this process, so each level has a baseline measured under the "
                             "same host load (0 = off)")
    parser.add_argument("--library-weights", type=Path, default=Path("../shared/models/yolov8n.pt"),
                        help="weights for --library-check (the server's model)")
    parser.add_argument("--onnx-cache-dir", type=Path, default=None, help="ONNX export cache for --library-check")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads for --library-check (0 = all cores)")
    parser.add_argument("--out", type=Path, default=Path("results/loadtest"), help="results folder")


def validate(args: argparse.Namespace) -> None:
    from app.core.errors import ConfigError

    if args.duration is None and args.requests is None:
        args.duration = 20.0
    if args.duration is not None and args.duration <= 0:
        raise ConfigError("--duration must be > 0")
    if args.requests is not None and args.requests < 1:
        raise ConfigError("--requests must be >= 1")
    if args.library_check < 0 or args.baseline_batch < 1:
        raise ConfigError("--library-check must be >= 0 and --baseline-batch >= 1")


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    validate(args)
    payloads = load_jpegs(args.images)
    per_level = args.requests if args.requests is not None else int(math.ceil(args.duration))
    meta = report.environment() | {"command": report.command_line("loadtest", sys.argv[2:]),
                                   "url": redact_url(args.url), "images_folder": str(args.images),
                                   "images": len(payloads),
                                   "mode": "requests" if args.requests is not None else "duration",
                                   "per_level": args.requests if args.requests is not None else args.duration}
    bar = tqdm(total=per_level * len(args.concurrency), unit="req" if args.requests is not None else "s",
               disable=args.no_progress, dynamic_ncols=True)
    try:
        rows, info = asyncio.run(sweep(args, payloads, bar))
    finally:
        bar.close()
    meta["server"] = info
    meta["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    library_fps = None
    if args.baseline is not None:
        library_fps, base_row = baseline_fps(args.baseline, info.get("backend"), args.baseline_batch)
        meta["baseline"] = {"file": str(args.baseline), "row": base_row}
    checks = targets(rows, library_fps)
    files = write_outputs(args.out, rows, meta, checks, plots=not args.no_plots)
    print((args.out / "loadtest.md").read_text())
    print("wrote " + ", ".join(str(f) for f in files), file=sys.stderr)
    return 0 if all(r["ok"] and not r["errors"] for r in rows) else 1  # any error in any level fails the run
