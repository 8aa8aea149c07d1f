"""``python -m app.tooling.viewcheck.report``: the view checks on the labelled real-photo test set.

Builds the sequences (COCO images of ``--dataset``, people from ultralytics' bus.jpg and
zidane.jpg), runs one monitor per sequence with the default options (or
``--sensitivity``), and prints for the tuned and the set-aside part separately: per
scenario the sequences that met the target and the time to alarm / to clear, per kind
the sequences raised in time and the false alarms, and the per-frame confusion table.
Then the per-check cost on one core (``--no-bench`` skips it). ``--json PATH`` writes it
all, ``--markdown PATH`` the tables for docs/rules.md ("Camera view checks"). Exit status 0 when every
target is met, 1 when not, 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import Progress
from rich.table import Table

from app.rules.site.viewchecks import ViewCheckConfigError, parse_options
from app.tooling.viewcheck.bench import bench, one_core
from app.tooling.viewcheck.evaluate import LABELS, run_sequence
from app.tooling.viewcheck.markdown import report_markdown
from app.tooling.viewcheck.scenarios import SCENARIOS
from app.tooling.viewcheck.sequences import build
from app.tooling.viewcheck.summary import PARTS, part_summary, sequence_record

DEFAULT_DATASET = Path(os.environ.get("CAMPUSGUARD_TEST_DATASET", "../shared/datasets/coco-val128"))


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dataset", type=Path, default=DEFAULT_DATASET,
                        help="COCO-style folder with images/ and labels/ (default: $CAMPUSGUARD_TEST_DATASET "
                             "or ../shared/datasets/coco-val128)")
    parser.add_argument("--per-scenario", type=int, default=6, help="sequences per scenario (a third is set aside)")
    parser.add_argument("--scenarios", default="", help="comma list of scenarios (default: all)")
    parser.add_argument("--sensitivity", default="normal", help="low | normal | high")
    parser.add_argument("--json", type=Path, help="write the full results to this file")
    parser.add_argument("--markdown", type=Path, help="write the result tables as Markdown to this file")
    parser.add_argument("--no-fresh", action="store_true", help="skip the fresh confirmation part")
    parser.add_argument("--no-bench", action="store_true", help="skip the per-check cost benchmark")
    parser.add_argument("--bench-repeat", type=int, default=300)
    parser.add_argument("--no-progress", action="store_true")


def run(args: argparse.Namespace) -> int:
    console = Console(stderr=True)
    scenarios = [s for s in args.scenarios.split(",") if s] or None
    unknown = sorted(set(scenarios or []) - set(SCENARIOS))
    if unknown or not 1 <= args.per_scenario <= 100 or args.bench_repeat < 1:
        console.print(f"[red]bad arguments: unknown scenarios {unknown}[/]" if unknown else
                      "[red]--per-scenario must be 1..100 and --bench-repeat >= 1[/]")
        return 2
    try:
        options = parse_options({"sensitivity": args.sensitivity})
    except ViewCheckConfigError as exc:
        console.print(f"[red]{exc}[/]")
        return 2
    try:
        sequences = build(args.dataset, args.per_scenario, scenarios)
        if not args.no_fresh:
            sequences += build(args.dataset, args.per_scenario, scenarios, fresh=True)
    except FileNotFoundError as exc:
        console.print(f"[red]{exc}[/]")
        return 2
    results = []
    with Progress(console=console, disable=args.no_progress, transient=True) as progress:
        task = progress.add_task("sequences", total=len(sequences))
        for seq in sequences:
            progress.update(task, description=seq.name)
            results.append(run_sequence(seq, options))
            progress.advance(task)
    parts = {part: part_summary(rs, options) for part in PARTS if (rs := [r for r in results if r.part == part])}
    out = Console()
    for part, summary in parts.items():
        print_part(out, part, summary)
    timings, pinned = [], ""
    if not args.no_bench:
        with Progress(console=console, disable=args.no_progress, transient=True) as progress, one_core() as pinned:
            task = progress.add_task("benchmark", total=None)
            timings = bench(args.dataset, args.bench_repeat, progress=lambda s: progress.update(task, description=s))
        print_bench(out, timings, pinned)
    met = all(p["targets_met"] for p in parts.values())
    out.print(f"[bold]targets {'met' if met else 'NOT met'}[/]: tamper within deadline "
              + ", ".join(f"{p} {s['tamper_in_time']}/{s['tamper_sequences']}" for p, s in parts.items())
              + "; alarms on hard negatives " + ", ".join(f"{p} {s['negative_alarms']}" for p, s in parts.items()))
    doc = {"options": options.model_dump(), "dataset": str(args.dataset), "parts": parts, "targets_met": met,
           "sequences": [sequence_record(r) for r in results],
           "benchmark": {"pinned": pinned if timings else None, "timings": [asdict(t) for t in timings]}}
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1, default=str))
    if args.markdown:
        args.markdown.write_text(report_markdown(json.loads(json.dumps(doc, default=str))))
    return 0 if met else 1


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def print_part(out: Console, part: str, summary: dict[str, Any]) -> None:
    title = f"{part.replace('_', '-')} part: {summary['sequences']} sequences, {summary['frames']} frames"
    table = Table(title=title)
    for col in ("scenario", "expect", "seqs", "met target", "alarm s (med/max)", "clear s max", "false alarms"):
        table.add_column(col, justify="left" if col in ("scenario", "expect") else "right")
    for row in summary["scenarios"]:
        expect = f"{row['kind']} <= {row['deadline_s']:.0f} s" if row["kind"] else "no alarm"
        tta, ttc = row["time_to_alarm_s"], row["time_to_clear_s"]
        table.add_row(row["scenario"], expect, str(row["sequences"]), f"{row['passed']}/{row['sequences']}",
                      f"{_s(tta['median'])}/{_s(tta['max'])}" if row["kind"] else "-",
                      _s(ttc["max"]) if row["kind"] else "-", str(row["false_alarms"]))
    out.print(table)
    kinds = Table(title=f"{part.replace('_', '-')} part: per kind")
    for col in ("kind", "sequences", "raised in time", "false alarms", "frame recall", "frame precision"):
        kinds.add_column(col, justify="right")
    for row in summary["kinds"]:
        kinds.add_row(row["kind"], str(row["sequences"]), str(row["raised_in_time"]), str(row["false_alarms"]),
                      "-" if row["frame_recall"] is None else f"{row['frame_recall']:.3f}",
                      "-" if row["frame_precision"] is None else f"{row['frame_precision']:.3f}")
    out.print(kinds)
    conf = Table(title=f"{part.replace('_', '-')} part: frames, true state (rows) x reported (columns)")
    conf.add_column("true \\ reported")
    for label in LABELS:
        conf.add_column(label, justify="right")
    for truth in LABELS:
        conf.add_row(truth, *(str(summary["confusion"][truth][rep]) for rep in LABELS))
    out.print(conf)


def print_bench(out: Console, timings: list, pinned: str) -> None:
    table = Table(title=f"cost per check, ms on one core ({pinned}, OpenCV 1 thread)")
    sizes = list(dict.fromkeys(t.size for t in timings))
    table.add_column("step")
    for size in sizes:
        table.add_column(f"{size} median / p95", justify="right")
    for step in dict.fromkeys(t.step for t in timings):
        cells = {t.size: f"{t.median_ms:.3f} / {t.p95_ms:.3f}" for t in timings if t.step == step}
        table.add_row(step, *(cells.get(s, "-") for s in sizes))
    out.print(table)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m app.tooling.viewcheck.report", description=__doc__.splitlines()[0])
    configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
