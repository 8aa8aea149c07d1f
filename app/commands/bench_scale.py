"""`campusguard bench scale`: the event store and the rules at site scale (docs/benchmarks.md, "Site scale").

Fills a database with synthetic events, outbox rows and logged frames (a throw-away
PostgreSQL cluster unless --db names a database: never point it at production data, the
tables are filled and deleted from), measures, prints a table per part and writes JSON.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.tooling.pgcluster import PostgresCluster

PARTS = ("events", "retention", "replay", "rules")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--db", default=None, help="SQLAlchemy URL of an EMPTY scratch database (default: a throw-away "
                                                   "PostgreSQL cluster, Debian's postgresql)")
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma list of {', '.join(PARTS)}")
    parser.add_argument("--events", type=int, default=1_000_000, help="events (default 1,000,000)")
    parser.add_argument("--cameras", type=int, default=500, help="cameras the events spread over (default 500)")
    parser.add_argument("--days", type=float, default=30.0, help="days the events spread over (default 30)")
    parser.add_argument("--frames", type=int, default=5_000_000, help="logged frames for replay (default 5,000,000)")
    parser.add_argument("--frame-cameras", type=int, default=10, help="cameras of the logged frames (default 10)")
    parser.add_argument("--replay-sample", type=int, default=100_000,
                        help="logged frames replayed through the evaluator for its rate (default 100,000)")
    parser.add_argument("--rules-cameras", type=int, default=100, help="cameras for the rules rate (default 100)")
    parser.add_argument("--rules-frames", type=int, default=100, help="frames per camera for the rules rate")
    parser.add_argument("--rules-rounds", type=int, default=3,
                        help="interleaved rounds of 1 and 2 rules workers, with and without tracking (default 3)")
    parser.add_argument("--objects", type=int, default=5, help="people per frame for the rules rate (default 5)")
    parser.add_argument("--out", type=Path, default=Path("results/scale"), help="results folder")
    parser.add_argument("--no-progress", action="store_true")


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from app.tooling.bench.scale_tables import print_tables

    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        from app.core.errors import ConfigError

        raise ConfigError(f"unknown parts {unknown}; choose from {', '.join(PARTS)}")
    console = Console(stderr=True)
    results: dict[str, Any] = {"meta": {"measured_at": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                                        "host": platform.node(), "cpus": os.cpu_count(),
                                        "load_average": list(os.getloadavg()),
                                        "args": {k: str(v) for k, v in vars(args).items() if k != "_run"}}}
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, disable=args.no_progress) as progress, _database(args) as url:
        results["meta"]["database"] = url.split("://", 1)[0]
        _measure(args, parts, url, progress, results)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "scale.json").write_text(json.dumps(results, indent=2, default=str))
    print_tables(results, Console())
    print(f"wrote {args.out / 'scale.json'}")
    return 0


def _measure(args: argparse.Namespace, parts: list[str], url: str, progress, results: dict[str, Any]) -> None:
    from app.rules.store.db import EventStore
    from app.tooling.bench import scale, scale_data, scale_rules

    end = dt.datetime(2026, 12, 1, tzinfo=dt.timezone.utc)
    store = EventStore(url)
    try:
        if {"events", "retention"} & set(parts):
            task = progress.add_task(f"filling {args.events:,} events + {2 * args.events:,} outbox rows",
                                     total=3 * args.events)
            scale_data.fill_events(store, args.events, args.cameras, args.days, end,
                                   lambda n: progress.advance(task, n))
        if "events" in parts:
            progress.add_task("GET /events queries", total=None)
            results["events"] = [t.row() for t in scale.event_queries(store, args.cameras, args.days, end)]
            results["events_before"] = [t.row() for t in scale.old_way(store)]
        if "retention" in parts:
            progress.add_task("retention with writers", total=None)

            def write(i: int) -> None:
                row = next(scale_data.event_rows(1, 3, 0.01, end + dt.timedelta(days=1), seed=10_000 + i))
                store.events.record({**row, "started_at": row["started_at"].isoformat(), "ended_at": None},
                                    [("http://hooks.lan/a", f"{row['id']}:started", b"{}")])

            results["retention"] = scale.retention(store, end - dt.timedelta(days=args.days / 2), write)
        if "replay" in parts:
            start = end + dt.timedelta(days=2)
            task = progress.add_task(f"filling {args.frames:,} logged frames", total=args.frames)
            scale_data.fill_frames(store, args.frames, args.frame_cameras, start,
                                   progress=lambda n: progress.advance(task, n))
            seconds = args.frames // args.frame_cameras + 1
            task = progress.add_task("replay reads", total=args.frames)
            results["replay"] = scale.replay_reads(store, scale_data.camera_ids(args.frame_cameras), start,
                                                   start + dt.timedelta(seconds=seconds),
                                                   progress=lambda n: progress.advance(task, n))
            progress.add_task("replay evaluation", total=None)
            window = dt.timedelta(seconds=max(1, args.replay_sample // args.frame_cameras))
            site = scale_rules.site(args.frame_cameras)
            rates = [scale.replay_rate(store, site, start + window, start + 2 * window, workers)
                     for _ in range(args.rules_rounds) for workers in (1, 2)]  # interleaved rounds
            results["replay_rate"] = rates[0]
            results["replay_rate_workers"] = rates
    finally:
        store.close()
    if "rules" in parts:
        task = progress.add_task("rules evaluation, 1 and 2 workers",
                                 total=len(scale_rules.VARIANTS) * args.rules_rounds)
        rules = scale_rules.interleaved(args.rules_cameras, args.rules_frames, args.objects, args.rules_rounds,
                                        progress=lambda: progress.advance(task, 1))
        results["rules"], results["rules_summary"] = rules["runs"], rules["summary"]
        results["meta"]["load_average_after_rules"] = rules["load_average_end"]


class _database:
    """--db, or a database in a throw-away PostgreSQL cluster (stopped and deleted after)."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.url = args.db
        self.cluster: PostgresCluster | None = None

    def __enter__(self) -> str:
        if self.url:
            return self.url
        from app.core.errors import ConfigError
        from app.tooling.pgcluster import PostgresCluster, find_bin_dir, free_port

        bin_dir = find_bin_dir()
        if bin_dir is None:
            raise ConfigError("no PostgreSQL server found (apt-get install postgresql), or pass --db URL")
        cluster = self.cluster = PostgresCluster(bin_dir, free_port()).start()
        return cluster.new_database()

    def __exit__(self, *exc: object) -> None:
        if self.cluster is not None:
            self.cluster.stop()
