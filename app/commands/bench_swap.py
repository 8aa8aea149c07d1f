"""`campusguard bench-swap`: the weights behind a name replaced under load (issue 41 part 3).

    campusguard bench-swap --duration 60 --swap-at 30 --json results/bench-swap.json

Starts ``campusguard serve`` (settings from the environment, as ``serve``; weights, models
folder, admin key, port and ingest=off set by the bench) over a models folder of its own,
feeds it with 4 keep-alive clients posting 1080p JPEG frames at full rate, replaces the
weights behind the served name at ``--swap-at`` (default: with a byte copy of them under
another file name) and reports failed requests, latency before and around the switch, the
swap's duration and the server's memory before, at its peak and after the old copy is freed
(app/tooling/bench/swap.py, swap_report.py). Exit 0 when every bound of the issue holds,
1 when one does not (the table says which), 2 on bad options.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from app.commands.common import imgsz_arg

DEFAULT_WEIGHTS = Path("../shared/models/yolov8n.pt")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--weights", type=Path, default=None,
                        help="the served weights, copied into the bench's models folder (default: "
                             "CAMPUSGUARD_WEIGHTS, else ../shared/models/yolov8n.pt)")
    parser.add_argument("--swap-weights", type=Path, default=None,
                        help="the weights swapped in, copied beside them (default: a copy of --weights)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of load (default 60)")
    parser.add_argument("--swap-at", type=float, default=30.0, help="when the swap starts, s (default 30)")
    parser.add_argument("--clients", type=int, default=4, help="keep-alive clients posting at full rate (default 4)")
    parser.add_argument("--imgsz", type=imgsz_arg, default=None, help="the server's IMGSZ (default: CAMPUSGUARD_IMGSZ, "
                                                                      "else 640)")
    parser.add_argument("--backend", choices=["torch", "onnx", "openvino"], default=None,
                        help="the server's backend (default: CAMPUSGUARD_BACKEND, else auto)")
    parser.add_argument("--onnx-cache-dir", type=Path, default=Path(".cache/campusguard"),
                        help="the server's built models (ONNX exports, OpenVINO IR), kept between runs")
    parser.add_argument("--ready-timeout", type=float, default=900.0, help="seconds to wait for the server's start")
    parser.add_argument("--json", type=Path, default=Path("results/bench-swap.json"), help="where the JSON goes")
    parser.add_argument("--no-progress", action="store_true")


def plan_of(args: argparse.Namespace):
    from app.core.errors import ConfigError
    from app.core.imgsz import format_imgsz
    from app.tooling.bench.swap import SwapPlan

    weights = args.weights or Path(os.environ.get("CAMPUSGUARD_WEIGHTS") or DEFAULT_WEIGHTS)
    if not weights.is_file():
        raise ConfigError(f"--weights {weights}: no such file")
    if args.swap_weights is not None and not args.swap_weights.is_file():
        raise ConfigError(f"--swap-weights {args.swap_weights}: no such file")
    if not 0 < args.swap_at < args.duration:
        raise ConfigError("--swap-at must be > 0 and below --duration")
    if args.clients < 1:
        raise ConfigError("--clients must be >= 1")
    return SwapPlan(weights=weights, swap_weights=args.swap_weights, duration_s=args.duration,
                    swap_at_s=args.swap_at, clients=args.clients,
                    imgsz=format_imgsz(args.imgsz) if args.imgsz is not None else None, backend=args.backend,
                    cache_dir=args.onnx_cache_dir, ready_timeout_s=args.ready_timeout)


def run(args: argparse.Namespace) -> int:
    os.environ.setdefault("YOLO_OFFLINE", "1")
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from app.tooling.bench import report
    from app.tooling.bench.swap import run_swap
    from app.tooling.bench.swap_report import rows as summary_rows
    from app.tooling.bench.swap_report import summarize, timeline

    plan = plan_of(args)
    console = Console()
    started = report.environment()
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed:.0f}/{task.total:.0f} s"),
                  TimeElapsedColumn(), console=console, disable=args.no_progress) as progress:
        task = progress.add_task("starting the server", total=plan.duration_s)

        def show(phase: str, seconds: float, counts: dict[str, int]) -> None:
            if phase == "starting":
                progress.update(task, description=f"starting the server ({seconds:.0f} s)")
            elif phase == "draining":
                progress.update(task, description=f"waiting for the old copy to be freed ({seconds:.0f} s)")
            else:
                said = f"{counts.get('ok', 0)} ok, {counts.get('failed', 0)} failed" if counts else ""
                progress.update(task, completed=min(seconds, plan.duration_s), description=f"{phase}: {said}")

        result = run_swap(plan, show)
    summary = summarize(plan, result)
    meta = started | {"command": report.command_line("bench-swap", sys.argv[2:]), "weights": str(plan.weights),
                      "swap_weights": str(plan.swap_weights or plan.weights), "duration_s": plan.duration_s,
                      "swap_at_s": plan.swap_at_s, "clients": plan.clients, "frame": "1920x1080 JPEG q90",
                      "imgsz": plan.imgsz, "server": result.server,
                      "load_average_end": [round(x, 2) for x in os.getloadavg()]}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    report.write_json(args.json, {"meta": meta, "summary": summary, "swap": result.swap,
                                  "timeline": timeline(result)})
    table = Table(title=f"bench-swap: {plan.clients} clients, 1080p JPEG, swap at {plan.swap_at_s:g} s of "
                        f"{plan.duration_s:g} s ({result.server.get('backend', '?')} "
                        f"{result.server.get('precision', '')}, {', '.join(result.server.get('shapes') or [])})")
    table.add_column("what")
    table.add_column("value", justify="right")
    for what, value in summary_rows(summary):
        table.add_row(what, value)
    console.print(table)
    print(f"wrote {args.json}")
    return 0 if summary["met"] else 1
