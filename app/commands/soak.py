"""`campusguard soak`: Soak: N requests (default 10,000) of mixed image sizes, tracking the server's memory.

The measuring lives in ``app.tooling.bench.soak``; this module is its command line.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
from pathlib import Path

from app.commands.loadtest import add_client_options
from app.core.redact import redact_url
from app.tooling.bench import report
from app.tooling.bench.http import load_jpegs
from app.tooling.bench.soak import frame_sizes, make_frames, soak, summarize_soak, targets, write_outputs


def configure(parser: argparse.ArgumentParser) -> None:
    add_client_options(parser)
    parser.add_argument("--requests", type=int, default=10_000, help="requests in all (default 10000)")
    parser.add_argument("--concurrency", type=int, default=8, help="requests in flight (default 8)")
    parser.add_argument("--variants", type=int, default=24, help="distinct frame sizes generated (default 24)")
    parser.add_argument("--min-side", type=int, default=64)
    parser.add_argument("--max-width", type=int, default=3840)
    parser.add_argument("--max-height", type=int, default=2160)
    parser.add_argument("--sample-every", type=int, default=100, help="read /metrics every N requests (default 100)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-growth-mb", type=float, default=50.0, help="target: RSS growth limit (default 50)")
    parser.add_argument("--out", type=Path, default=Path("results/soak"), help="results folder")


def validate(args: argparse.Namespace) -> None:
    from app.core.errors import ConfigError

    if args.requests < 1 or args.concurrency < 1 or args.sample_every < 1 or args.variants < 1:
        raise ConfigError("--requests, --concurrency, --sample-every and --variants must be >= 1")
    if not (1 <= args.min_side <= min(args.max_width, args.max_height)):
        raise ConfigError("--min-side must be between 1 and the smaller of --max-width/--max-height")


def run(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    validate(args)
    sizes = frame_sizes(args.variants, args.min_side, args.max_width, args.max_height, args.seed)
    frames = make_frames(load_jpegs(args.images, limit=max(args.variants, 1)), sizes)
    rng = random.Random(args.seed)
    order = [rng.randrange(len(frames)) for _ in range(min(args.requests, 4096))]
    meta = report.environment() | {"command": report.command_line("soak", sys.argv[2:]), "url": redact_url(args.url),
                                   "concurrency": args.concurrency, "sample_every": args.sample_every,
                                   "frame_sizes": sizes, "frame_bytes": [len(f) for f in frames]}
    bar = tqdm(total=args.requests, unit="req", disable=args.no_progress, dynamic_ncols=True)
    try:
        result = asyncio.run(soak(args, frames, order, bar))
    finally:
        bar.close()
    meta["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    meta["server"] = result["server"]
    summary = summarize_soak(args, result, sizes, order)
    checks = targets(summary, args.max_growth_mb)
    files = write_outputs(args.out, summary, result["samples"], meta, checks, plots=not args.no_plots)
    print((args.out / "soak.md").read_text())
    print("wrote " + ", ".join(str(f) for f in files), file=sys.stderr)
    return 0 if summary["errors"] == 0 else 1
