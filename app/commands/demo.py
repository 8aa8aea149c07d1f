"""Start the service with a demo camera: a generated clip of a person crossing a line and walking into a zone.

``make demo``. The clip is made once from ``bus.jpg`` (it ships with ultralytics) under
``<data_dir>/demo/``; ``demo-cam`` is added to the first run's site file (created if
missing, as ``make run`` does), with the clip as its ``file://`` source, looped (it stays for
later ``make run``s: the summary then says how to remove it); then the service starts with
rules and the embedded ingest on. Open the console: the camera's tile shows frames within
seconds, the Events page a line crossing and an intrusion soon after.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.console import Console
from rich.table import Table

from app.commands.serve import serve, starter_site
from app.config import load_settings

CLIP_SECONDS = 14.0  # a walk slow enough for the tracker at a detection every second (clip.py)


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=None, help="default: CAMPUSGUARD_HOST or 127.0.0.1")
    parser.add_argument("--port", type=int, default=None, help="default: CAMPUSGUARD_PORT or 8000")
    parser.add_argument("--no-serve", action="store_true", help="prepare the clip and the site file, do not start")


def prepare(data_dir: Path, site: Path) -> dict[str, str]:
    """The clip (made once) and ``demo-cam`` in the site file; what was done, for the summary."""
    from app.tooling.demo.clip import bus_jpg, make_walk_clip, street_background
    from app.tooling.demo.site import add_demo_camera, removal

    folder = data_dir / "demo"
    clip = folder / "walk.mp4"
    done = {"site file": str(site), "clip": str(clip)}
    if not clip.is_file():
        print("campusguard demo: making the demo clip (a few seconds) ...", file=sys.stderr)
        background = street_background(folder / "street.png")
        tmp = folder / ".walk.tmp.mp4"
        make_walk_clip(tmp, background, bus_jpg(), seconds=CLIP_SECONDS, walk=(0.12, 0.88))
        tmp.replace(clip)
        done["clip"] += " (made now)"
    if add_demo_camera(site, clip):
        done["site file"] += " (demo-cam added)"
        done["to remove it"] = removal(site)
    return done


def run(args: argparse.Namespace) -> int:
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    settings = load_settings(**overrides)
    site = starter_site(settings)
    done = prepare(settings.data_dir, site)
    table = Table(title="campusguard demo", show_header=False)
    for key, value in {**done, "console": f"http://{settings.host}:{settings.port}/ui/#/cameras",
                       "camera": "demo-cam: a line crossing (in) and an intrusion in zone lawn every loop"}.items():
        table.add_row(key, value)
    Console(stderr=True).print(table)
    if args.no_serve:
        return 0
    return serve({**overrides, "site_config": site})
