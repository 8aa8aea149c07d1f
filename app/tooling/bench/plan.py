"""What ``campusguard bench`` measures: one plan row per model size and precision."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from app.tooling.bench.args import DEFAULT_WEIGHTS


@dataclass(frozen=True)
class Plan:
    size: str
    weights: str
    precision: str
    batches: list[int]
    iterations: int


def make_plan(args: argparse.Namespace) -> list[Plan]:
    weights = dict(DEFAULT_WEIGHTS) | dict(args.weights)
    batches = dict(args.batches_for)
    iterations = dict(args.iterations_for)
    return [Plan(size, weights[size], precision, batches.get(size, args.batches), iterations.get(size, args.iterations))
            for size in args.sizes for precision in args.precisions]


def total_steps(plans: list[Plan], args: argparse.Namespace) -> int:
    """Iterations the progress bar counts (warm-up included)."""
    steps = 0
    per_row = args.warmup
    for plan in plans:
        if "ultralytics" in args.references:
            steps += per_row + plan.iterations
        for _backend in args.backends:
            kinds = 2 if "raw" in args.references else 1
            steps += kinds * len(plan.batches) * (per_row + plan.iterations)
    return steps
