"""`campusguard campus-load`: a campus's cameras against a running server (N cameras at F fps, newest frame wins).

The measuring lives in ``app.tooling.bench.campus``; this module is its command line. Write
the site file the server needs first (``--write-site``; unknown cameras are not evaluated),
start the server with it, then run the load. The summary table gives frames answered,
superseded and refused, latency, and the CPU per frame of the server and of the generator.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
import urllib.request
from pathlib import Path

from app.core.errors import ConfigError
from app.core.redact import redact_url
from app.tooling.bench import report
from app.tooling.bench.campus import CampusPlan, camera_ids, run_campus, server_cpu_seconds, site_yaml

DEFAULT_IMAGES = Path("../shared/datasets/coco-val128/images")
ROWS = [("answered frames/s", "answered_fps", 1), ("offered frames/s", "offered_fps", 1),
        ("answered", "answered", 0), ("superseded", "superseded", 0), ("superseded share", "superseded_share", 3),
        ("refused (503)", "refused", 0), ("failed", "failed", 0), ("p50 ms", "lat_p50_ms", 1),
        ("p95 ms", "lat_p95_ms", 1), ("p99 ms", "lat_p99_ms", 1),
        ("server CPU ms / answered frame", "server_cpu_ms_per_frame", 2),
        ("generator CPU ms / sent frame", "generator_cpu_ms_per_frame", 2)]


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", default="http://127.0.0.1:8000", help="server base URL")
    parser.add_argument("--cameras", type=int, default=300, help="cameras (default 300)")
    parser.add_argument("--fps", type=float, default=2.0, help="frames per second per camera (default 2)")
    parser.add_argument("--seconds", type=float, default=60.0, help="how long to offer frames (default 60)")
    parser.add_argument("--processes", type=int, default=4, help="generator processes (default 4)")
    parser.add_argument("--images", type=Path, default=DEFAULT_IMAGES, help="real images the frames are made from")
    parser.add_argument("--size", default="1920x1080", help="frame size WxH (default 1920x1080)")
    parser.add_argument("--quality", type=int, default=90, help="JPEG quality (default 90)")
    parser.add_argument("--api-key", default=os.environ.get("CAMPUSGUARD_BENCH_API_KEY"),
                        help="sent as X-API-Key (default: $CAMPUSGUARD_BENCH_API_KEY)")
    parser.add_argument("--write-site", type=Path, default=None, metavar="PATH",
                        help="only write the site file listing the cameras (for the server) and exit")
    parser.add_argument("--out", type=Path, default=Path("results/campus"), help="results folder")
    parser.add_argument("--no-progress", action="store_true")


def validate(args: argparse.Namespace) -> tuple[int, int]:
    if args.cameras < 1 or args.cameras > 5000:
        raise ConfigError("--cameras must be 1..5000")
    if not 0 < args.fps <= 30:
        raise ConfigError("--fps must be > 0 and <= 30")
    if args.seconds <= 0 or args.processes < 1 or not 1 <= args.quality <= 100:
        raise ConfigError("--seconds must be > 0, --processes >= 1 and --quality 1..100")
    width, _, height = args.size.lower().partition("x")
    if not (width.isascii() and width.isdigit() and height.isascii() and height.isdigit()) \
            or not (16 <= int(width) <= 7680 and 16 <= int(height) <= 4320):
        raise ConfigError(f"--size must be WxH within 16x16..7680x4320, e.g. 1920x1080, got {args.size!r}")
    return int(width), int(height)


def scrape_cpu(url: str, api_key: str | None) -> float | None:
    request = urllib.request.Request(url.rstrip("/") + "/metrics", headers={"X-API-Key": api_key} if api_key else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return server_cpu_seconds(response.read().decode())
    except OSError:
        return None


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from app.tooling.bench.camera_frames import camera_jpegs

    width, height = validate(args)
    cameras = camera_ids(args.cameras)
    if args.write_site is not None:
        args.write_site.write_text(site_yaml(cameras))
        print(f"wrote {args.write_site}: {len(cameras)} cameras; start the server with "
              f"CAMPUSGUARD_SITE_CONFIG={args.write_site}")
        return 0
    images = sorted(p for p in args.images.glob("*.jpg"))
    if not images:
        raise ConfigError(f"--images {args.images} holds no .jpg files")
    frames = camera_jpegs(images, (width, height), count=8, quality=args.quality)
    plan = CampusPlan(url=args.url, cameras=cameras, fps=args.fps, seconds=args.seconds,
                      processes=args.processes, api_key=args.api_key)
    console = Console(stderr=True)
    cpu_before = scrape_cpu(args.url, args.api_key)
    result: dict = {}
    worker = threading.Thread(target=lambda: result.update(run_campus(plan, frames)), daemon=True)
    with console.status("offering frames", spinner="dots") as status:
        started = time.monotonic()
        worker.start()
        while worker.is_alive():
            worker.join(0.5)
            if not args.no_progress:
                status.update(f"{len(cameras)} cameras at {args.fps:g} fps: "
                              f"{min(time.monotonic() - started, args.seconds + 2):.0f} / {args.seconds:.0f} s")
    if not result:
        raise ConfigError("the generator processes failed (see above)")
    cpu_after = scrape_cpu(args.url, args.api_key)
    server_cpu = cpu_after - cpu_before if cpu_before is not None and cpu_after is not None else None
    result["server_cpu_s"] = server_cpu
    result["server_cpu_ms_per_frame"] = (1e3 * server_cpu / result["answered"]
                                         if server_cpu is not None and result["answered"] else None)
    meta = report.environment() | {"command": report.command_line("campus-load", sys.argv[2:]),
                                   "url": redact_url(args.url), "frame_size": f"{width}x{height}",
                                   "jpeg_quality": args.quality,
                                   "frame_bytes_mean": sum(map(len, frames)) / len(frames)}
    args.out.mkdir(parents=True, exist_ok=True)
    path = report.write_json(args.out / "campus.json", {"meta": meta, "result": result})
    table = Table(title=f"campus load: {len(cameras)} cameras x {args.fps:g} fps, {width}x{height} q{args.quality}, "
                        f"{args.processes} generator processes")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for label, key, digits in ROWS:
        table.add_row(label, report.fmt(result.get(key), digits))
    Console().print(table)
    if result["first_errors"]:
        console.print("first errors: " + "; ".join(result["first_errors"]))
    console.print(f"wrote {path}")
    return 0 if result["failed"] == 0 else 1
