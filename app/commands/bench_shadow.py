"""`campusguard bench-shadow`: detection p50/p95 and admission with the shadow lane on vs off.

    campusguard bench-shadow --imgsz 320 --rps 8 --requests 200 --rounds 3 --sample 0.01

Settings come from the environment like `serve` (CAMPUSGUARD_BACKEND, _WEIGHTS, ...); the
reference from --reference (default torch on the CPU). Prints a table and each mode's range of
per-round p50/p95 (the machine's noise, against which to read the ratios), writes JSON (with
every round).
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from app.commands.common import imgsz_arg


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--images", type=Path, default=Path("../shared/datasets/coco-val128/images"))
    parser.add_argument("--imgsz", type=imgsz_arg, default=None, help="default: CAMPUSGUARD_IMGSZ")
    parser.add_argument("--reference", choices=("torch", "onnx"), default="torch")
    parser.add_argument("--sample", type=float, default=0.01, help="CAMPUSGUARD_SHADOW_SAMPLE of the 'on' rounds")
    parser.add_argument("--rps", type=float, default=8.0, help="request rate (open loop)")
    parser.add_argument("--requests", type=int, default=200, help="requests per round")
    parser.add_argument("--rounds", type=int, default=3, help="rounds per mode, alternating off/on")
    parser.add_argument("--out", type=Path, default=Path("results/shadow-bench.json"))


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("YOLO_OFFLINE", "1")
    from tqdm import tqdm

    from app import wiring
    from app.config import load_settings
    from app.core.errors import ConfigError
    from app.core.metrics import Metrics
    from app.inference.shadow.lane import ShadowLane
    from app.inference.vision.decode import image_files
    from app.tooling.bench import report
    from app.tooling.bench.shadow_ab import per_round, run_round, spread, summarize

    if not 0 < args.sample <= 1 or args.rps <= 0 or args.requests < 1 or args.rounds < 1:
        raise ConfigError("--sample must be in (0, 1], --rps > 0, --requests and --rounds >= 1")
    overrides = {"shadow_backend": args.reference, "shadow_sample": args.sample, "warmup_iters": 2}
    if args.imgsz is not None:
        overrides["imgsz"] = args.imgsz
    settings = load_settings(**overrides)
    frames = [p.read_bytes() for p in image_files(args.images)[:32]]
    if not frames:
        raise ConfigError(f"no images in {args.images}")
    metrics = Metrics()
    engine = wiring.build_engine(settings, wiring.build_pipeline(settings), metrics)
    engine.start()
    engine.warmup(settings.warmup_iters)
    engine.mark_ready()
    lane = wiring.build_shadow(settings, engine, metrics)
    if not isinstance(lane, ShadowLane):  # --reference always names one; this is a wiring bug
        raise ConfigError(f"no shadow lane was built for --reference {args.reference}")
    lane.start()
    rounds = []
    try:
        for i in tqdm(range(args.rounds * 2), desc="rounds (off/on alternating)"):
            rounds.append(run_round(engine, lane, "off" if i % 2 == 0 else "on", frames, args.rps, args.requests))
    finally:
        engine.begin_drain()
        engine.stop()
        lane.stop()
    rows = summarize(rounds)
    served = engine.pipeline.detector
    meta = report.environment() | {"backend": served.backend, "precision": served.precision,
                                   "imgsz": str(settings.imgsz), "reference": args.reference, "sample": args.sample,
                                   "rps": args.rps, "requests_per_round": args.requests, "rounds": args.rounds}
    each = per_round(rounds)
    report.write_json(args.out, {"meta": meta, "rows": rows, "rounds": each})
    print(report.markdown_table(rows, [("mode", "shadow", 0), ("requests", "requests", 0), ("p50_ms", "p50 ms", 1),
                                       ("p95_ms", "p95 ms", 1), ("admitted", "admitted", 3),
                                       ("p50_vs_off", "p50 vs off", 3), ("p95_vs_off", "p95 vs off", 3),
                                       ("sampled", "sampled", 0), ("compared", "compared", 0),
                                       ("dropped", "dropped", 0)]))
    print(f"per round, p50 ms: {spread(each, 'p50_ms')}; p95 ms: {spread(each, 'p95_ms')}")
    print(f"wrote {args.out}")
    return 0
