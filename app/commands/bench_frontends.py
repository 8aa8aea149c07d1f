"""`campusguard bench-frontends`: the server's CPU per request with 1, 2 and 4 HTTP processes.

    campusguard bench-frontends --frontends 1,2,4 --seconds 15 --json results/bench-frontends.json

For each count it starts ``campusguard serve`` with CAMPUSGUARD_FRONTENDS set to it and a
fake instant backend (app/tooling/bench/instant.py: the model's forward answered from a
cache, everything else as served), offers the same campus load (``campus-load``'s
generator: cameras at a frame rate, one frame in flight per camera, raw JPEG bodies with
``camera_id`` and ``timestamp``) and reads the server's CPU from its ``/metrics`` (the
owner's process CPU plus its front ends'), per answered frame. Rounds alternate the counts
(1, 2, 4, 1, 2, 4...) and the table gives the median per count, so a busy neighbour on the
machine hits every count alike. It answers one question: does the service's CPU per request
grow with the number of processes (the hand-over's cost), and by how much.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

from app.commands.campus_load import DEFAULT_IMAGES
from app.core.errors import ConfigError
from app.tooling.bench import report

DEFAULT_WEIGHTS = Path("../shared/models/yolov8n.pt")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--frontends", default="1,2,4",
                        help="comma list of CAMPUSGUARD_FRONTENDS values (default 1,2,4)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds over the counts; the median is reported")
    parser.add_argument("--cameras", type=int, default=40, help="cameras (default 40)")
    parser.add_argument("--fps", type=float, default=5.0, help="frames per second per camera (default 5)")
    parser.add_argument("--seconds", type=float, default=12.0, help="load per run (default 12)")
    parser.add_argument("--processes", type=int, default=2, help="generator processes (default 2)")
    parser.add_argument("--size", default="640x480", help="frame size WxH (default 640x480: the HTTP side, not decode)")
    parser.add_argument("--images", type=Path, default=DEFAULT_IMAGES, help="real images the frames are made from")
    parser.add_argument("--weights", type=Path, default=None,
                        help="weights the instant backend is built from (default CAMPUSGUARD_WEIGHTS, else "
                             "../shared/models/yolov8n.pt)")
    parser.add_argument("--port", type=int, default=18391, help="the server's port")
    parser.add_argument("--json", type=Path, default=Path("results/bench-frontends.json"), help="results file")
    parser.add_argument("--serve-instant", action="store_true", help=argparse.SUPPRESS)  # the server's own process


def run(args: argparse.Namespace) -> int:
    if args.serve_instant:
        return serve_instant()
    counts = [int(v) for v in args.frontends.split(",") if v.strip()]
    if not counts or any(n < 1 or n > 64 for n in counts) or args.rounds < 1:
        raise ConfigError("--frontends must list counts 1..64 and --rounds be >= 1")
    weights = args.weights or Path(os.environ.get("CAMPUSGUARD_WEIGHTS") or DEFAULT_WEIGHTS)
    if not weights.is_file():
        raise ConfigError(f"weights not found: {weights} (--weights)")
    runs: list[dict[str, Any]] = []
    for round_ in range(args.rounds):
        for count in counts:
            print(f"round {round_ + 1}/{args.rounds}: CAMPUSGUARD_FRONTENDS={count}", file=sys.stderr)
            runs.append({"frontends": count, "round": round_ + 1} | one_run(args, count, weights))
    rows = summarize(runs, counts)
    print_table(rows, args)
    meta = report.environment() | {"command": report.command_line("bench-frontends", sys.argv[2:]),
                                   "backend": "instant (torch detector, forward cached)", "frame_size": args.size}
    path = report.write_json(args.json, {"meta": meta, "summary": rows, "runs": runs})
    print(f"wrote {path}", file=sys.stderr)
    return 0


def serve_instant() -> int:
    """The bench's server: ``campusguard serve`` with every backend answering instantly."""
    from app.commands.serve import serve
    from app.tooling.bench.instant import install_instant

    install_instant()
    return serve({})


def one_run(args: argparse.Namespace, count: int, weights: Path) -> dict[str, Any]:
    from app.commands.campus_load import validate
    from app.tooling.bench.camera_frames import camera_jpegs
    from app.tooling.bench.campus import CampusPlan, camera_ids, run_campus

    size = validate(argparse.Namespace(cameras=args.cameras, fps=args.fps, seconds=args.seconds,
                                       processes=args.processes, quality=90, size=args.size))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPUSGUARD_")}
    env.update(CAMPUSGUARD_FRONTENDS=str(count), CAMPUSGUARD_PORT=str(args.port), CAMPUSGUARD_WEIGHTS=str(weights),
               CAMPUSGUARD_BACKEND="torch", CAMPUSGUARD_PRECISION="fp32", CAMPUSGUARD_IMGSZ="320",
               CAMPUSGUARD_WARMUP_ITERS="0", CAMPUSGUARD_INGEST="off", CAMPUSGUARD_LOG_LEVEL="WARNING")
    url = f"http://127.0.0.1:{args.port}"
    proc = subprocess.Popen([sys.executable, "-m", "app.cli", "bench-frontends", "--serve-instant"], env=env)
    try:
        wait_ready(url, proc)
        frames = camera_jpegs(sorted(args.images.glob("*.jpg")), size, count=8, quality=90)
        plan = CampusPlan(url=url, cameras=camera_ids(args.cameras), fps=args.fps, seconds=args.seconds,
                          processes=args.processes)
        before = scrape_split(url)
        result = run_campus(plan, frames)
        after = scrape_split(url)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    owner, fronts = after[0] - before[0], after[1] - before[1]
    answered = result["answered"]
    per_frame = (lambda s: 1e3 * s / answered if answered else None)  # noqa: E731
    return {"answered": answered, "answered_fps": result["answered_fps"], "failed": result["failed"],
            "superseded": result["superseded"],
            "refused": result["refused"], "lat_p50_ms": result["lat_p50_ms"], "lat_p95_ms": result["lat_p95_ms"],
            "server_cpu_s": owner + fronts, "server_cpu_ms_per_frame": per_frame(owner + fronts),
            "owner_cpu_ms_per_frame": per_frame(owner), "frontends_cpu_ms_per_frame": per_frame(fronts),
            "generator_cpu_ms_per_frame": result["generator_cpu_ms_per_frame"]}


def scrape_split(url: str) -> tuple[float, float]:
    """(the serving process's CPU s, its front ends' CPU s) from /metrics; with one process
    the second is 0."""
    from app.tooling.bench.campus import CPU_METRIC, FRONTEND_CPU_METRIC

    with urllib.request.urlopen(url + "/metrics", timeout=10) as response:
        text = response.read().decode()
    values = {line.split()[0]: float(line.split()[1]) for line in text.splitlines()
              if line.startswith((CPU_METRIC + " ", FRONTEND_CPU_METRIC + " "))}
    return values.get(CPU_METRIC, 0.0), values.get(FRONTEND_CPU_METRIC, 0.0)


def wait_ready(url: str, proc: subprocess.Popen, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ConfigError(f"the bench's server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(url + "/health/ready", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.3)
    raise ConfigError(f"the bench's server was not ready within {timeout_s:.0f} s")


def summarize(runs: list[dict[str, Any]], counts: list[int]) -> list[dict[str, Any]]:
    rows = []
    for count in counts:
        mine = [r for r in runs if r["frontends"] == count]

        def median(key: str, of: list[dict[str, Any]] = mine) -> float | None:
            values = [r[key] for r in of if r[key] is not None]
            return statistics.median(values) if values else None

        rows.append({"frontends": count, "runs": len(mine), "answered_fps": median("answered_fps"),
                     "server_cpu_ms_per_frame": median("server_cpu_ms_per_frame"),
                     "server_cpu_ms_per_frame_each": [r["server_cpu_ms_per_frame"] for r in mine],
                     "owner_cpu_ms_per_frame": median("owner_cpu_ms_per_frame"),
                     "frontends_cpu_ms_per_frame": median("frontends_cpu_ms_per_frame"),
                     "lat_p50_ms": median("lat_p50_ms"), "lat_p95_ms": median("lat_p95_ms"),
                     "failed": sum(r["failed"] for r in mine), "refused": sum(r["refused"] for r in mine),
                     "generator_cpu_ms_per_frame": median("generator_cpu_ms_per_frame")})
    return rows


def print_table(rows: list[dict[str, Any]], args: argparse.Namespace) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"CAMPUSGUARD_FRONTENDS=N: server CPU per answered frame (all its processes), instant "
                        f"backend, {args.cameras} cameras x {args.fps:g} fps, {args.size}, {args.seconds:g} s a run, "
                        f"median of {args.rounds}")
    for column in ("N", "frames/s", "CPU ms/frame", "owner", "front ends", "runs", "p50 ms", "p95 ms", "failed",
                   "gen. CPU ms"):
        table.add_column(column, justify="right")
    for r in rows:
        table.add_row(str(r["frontends"]), report.fmt(r["answered_fps"], 1),
                      report.fmt(r["server_cpu_ms_per_frame"], 2),
                      report.fmt(r["owner_cpu_ms_per_frame"], 2), report.fmt(r["frontends_cpu_ms_per_frame"], 2),
                      ", ".join(report.fmt(v, 2) for v in r["server_cpu_ms_per_frame_each"]),
                      report.fmt(r["lat_p50_ms"], 1), report.fmt(r["lat_p95_ms"], 1), str(r["failed"]),
                      report.fmt(r["generator_cpu_ms_per_frame"], 2))
    Console().print(table)
