"""Replay a site file over the logged detections: the events it would raise next to those recorded.

`campusguard replay --site NEW.yaml --since 2026-11-01 [--until ...] [--camera ID ...] [--db URL] [--json]`
reads the detection log (CAMPUSGUARD_DETECTION_LOG) from the event store, re-runs NEW.yaml's
rules with the service's own evaluator (no model, no images, nothing written or sent) and
prints a table per camera/zone/rule. The logic is app/rules/service/replay.py; this module parses
and prints. Bad input (invalid site file, unknown camera, empty window, bad dates) exits 2.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from pathlib import Path

from pydantic import TypeAdapter, ValidationError

from app.core.timeutil import IsoDatetime, iso, utcnow

_WHEN = TypeAdapter(IsoDatetime)
MAX_LISTED = 50  # differing events listed under the table


def when_arg(value: str) -> dt.datetime:
    """argparse type: ISO 8601 (a date alone is its midnight; naive = UTC), as the HTTP API."""
    try:
        return _WHEN.validate_python(value)
    except ValidationError as exc:
        msg = exc.errors()[0]["msg"].removeprefix("Value error, ")
        raise argparse.ArgumentTypeError(f"{value!r}: {msg}") from None


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--site", type=Path, required=True, help="the site YAML to try (validated like a reload)")
    parser.add_argument("--since", type=when_arg, required=True,
                        help="window start, ISO 8601 (2026-11-01 = midnight UTC)")
    parser.add_argument("--until", type=when_arg, default=None, help="window end, ISO 8601 (default: now)")
    parser.add_argument("--camera", action="append", default=None, metavar="ID",
                        help="only this camera (repeatable; default: every camera of the site file)")
    parser.add_argument("--db", default=None, help="event store URL (default: CAMPUSGUARD_EVENTS_DB_URL)")
    parser.add_argument("--workers", type=_workers, default=1,
                        help="replay the cameras in this many processes, split as the live rules shards split them "
                             "(default 1)")
    parser.add_argument("--json", action="store_true", help="print a JSON summary as the last line")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
    from sqlalchemy.exc import DBAPIError

    from app.config import load_settings
    from app.rules.service.replay import compare
    from app.rules.site.loader import load_site_config
    from app.rules.store.db import EventStore
    from app.rules.store.errors import StoreUnavailable, describe

    site = load_site_config(args.site)  # SiteConfigError lists every problem (exit 2)
    store = EventStore(args.db or load_settings().events_db_url, migrate=False)
    until = args.until or utcnow()
    err = Console(stderr=True)
    try:
        with Progress(TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                      console=err, transient=True) as bar:
            task = bar.add_task("frames", total=None)
            result = compare(store, site, args.since, until, args.camera,
                             progress=lambda n: bar.advance(task, n),
                             on_total=lambda n: bar.update(task, total=n), workers=args.workers)
    except DBAPIError as exc:
        raise StoreUnavailable(f"cannot read the detection log from {store.safe_url}: {describe(exc)} "
                               "(run `campusguard db upgrade` if the schema is older)") from None
    finally:
        store.close()
    print_comparison(result, Console(width=None if sys.stdout.isatty() else 120))
    if args.json:
        print(json.dumps(result.to_dict(), separators=(",", ":")), flush=True)
    return 0


def print_comparison(result, console) -> None:
    from rich.table import Table

    totals = result.totals()
    table = Table(title=f"{iso(result.since)} .. {iso(result.until)}: {result.frames} logged frame(s), "
                        f"{len(result.cameras)} camera(s)")
    for name in ("camera", "zone", "rule"):
        table.add_column(name)
    for name in ("recorded", "replayed", "matched", "would disappear", "new"):
        table.add_column(name, justify="right")
    for r in result.rules:
        table.add_row(r.camera_id, r.zone, r.rule, str(r.recorded), str(r.replayed), str(r.matched),
                      str(len(r.only_recorded)), str(len(r.only_replayed)))
    table.add_section()
    table.add_row("total", "", "", *(str(totals[k]) for k in ("recorded", "replayed", "matched", "only_recorded",
                                                                  "only_replayed")))
    console.print(table)
    diffs = [("-", r, s) for r in result.rules for s in r.only_recorded] + \
            [("+", r, s) for r in result.rules for s in r.only_replayed]
    diffs.sort(key=lambda d: (d[2].started_at, d[0]))
    for sign, r, span in diffs[:MAX_LISTED]:
        ended = iso(span.ended_at) or "open"
        console.print(f"{sign} {r.camera_id}/{r.zone}/{r.rule} {iso(span.started_at)} .. {ended}",
                      highlight=False, markup=False)
    if len(diffs) > MAX_LISTED:
        console.print(f"... and {len(diffs) - MAX_LISTED} more (--json lists them all)")


def _workers(text: str) -> int:
    """--workers: 1 to 64."""
    import argparse

    try:
        n = int(text)
    except ValueError:
        n = 0
    if not 1 <= n <= 64:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to 64, not {text!r}")
    return n
