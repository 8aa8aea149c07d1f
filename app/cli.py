"""`campusguard COMMAND`: the command table (every command and its options: docs/cli.md).

Each command lives in its own module exposing ``configure(parser)`` and ``run(args) ->
int``; this file only wires them together, so adding a command is one line in COMMANDS.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from app import __version__
from app.core.errors import ServiceError

COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("app.commands.serve", "run the HTTP service (uvicorn) with settings from the environment"),
    "export": ("app.commands.export", "export weights to a fixed-shape ONNX model"),
    "eval": ("app.commands.eval", "COCO mAP of a backend over a YOLO-format dataset"),
    "detect": ("app.commands.detect", "detect objects in image files and print JSON"),
    "db": ("app.commands.db", "event-store schema: apply pending migrations, show the current revision"),
    "bench": ("app.commands.bench", "benchmark backends x sizes x batches (the migration table)"),
    "loadtest": ("app.commands.loadtest", "HTTP concurrency sweep against a running server"),
    "campus-load": ("app.commands.campus_load", "a campus's cameras against a running server: N cameras at F fps, "
                                                "newest frame wins, CPU per frame of server and generator"),
    "soak": ("app.commands.soak", "long mixed-size run against a running server, tracking memory"),
    "parity": ("app.commands.parity", "detections on a device/precision against a stored CPU reference"),
    "bench-shadow": ("app.commands.bench_shadow",
                     "detection p50/p95 and admission with the shadow reference on vs off"),
    "bench-frontends": ("app.commands.bench_frontends", "the server's CPU per request with 1, 2 and 4 HTTP "
                        "processes (CAMPUSGUARD_FRONTENDS) and an instant backend"),
    "bench-swap": ("app.commands.bench_swap", "the weights behind a name replaced under load: failed requests, p99 "
                                              "around the switch, the server's memory before and after"),
    "replay": ("app.commands.replay", "re-run a site file's rules over the detection log, next to the recorded events"),
    "keys": ("app.commands.keys",
             "API keys: make one (secret printed once, hashed line for the keys file), check a file"),
    "viewcheck-report": ("app.commands.viewcheck", "camera view checks on their labelled real-photo test set: "
                                                   "confusion tables, time to alarm, per-check cost"),
    "gateway": ("app.commands.gateway", "pull the site file's camera streams and POST their frames to the service"),
    "demo": ("app.commands.demo",
             "start the service with a demo camera (a generated clip: a line crossing, an intrusion)"),
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="campusguard", description="CampusGuard Detector")
    parser.add_argument("--version", action="version", version=f"campusguard {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (module_name, help_text) in COMMANDS.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name and module_name.startswith(exc.name):  # the command's own module, not a dependency of it
                raise ModuleNotFoundError(f"campusguard: the command {name!r} is listed in app/cli.py's COMMANDS but "
                                          f"its module {module_name} is missing: add the module or remove the entry",
                                          name=module_name) from exc
            raise
        cmd = sub.add_parser(name, help=help_text, description=(module.__doc__ or help_text).strip().splitlines()[0])
        module.configure(cmd)
        cmd.set_defaults(_run=module.run)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args._run(args) or 0)
    except ServiceError as exc:
        print(f"campusguard {args.command}: error: {exc.message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
