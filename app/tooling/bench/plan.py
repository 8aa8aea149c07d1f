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
        if runs_ultralytics(plan, args):
            steps += per_row + plan.iterations
        for _backend in (b for b in args.backends if runs(b, plan.precision, args.device)):
            kinds = 2 if "raw" in args.references else 1
            steps += kinds * len(plan.batches) * (per_row + plan.iterations)
    return steps


def runs(backend: str, precision: str, device: str) -> bool:
    """Whether ``backend`` runs ``precision`` on ``device`` (the service's table): a plan of
    several backends skips the pairs that do not exist (bf16 on onnx, int8 on torch)."""
    from app.inference.precision.spec import SUPPORT, device_kind

    return precision in SUPPORT.get(backend, {}).get(device_kind(device), frozenset())


def runs_ultralytics(plan: Plan, args: argparse.Namespace) -> bool:
    """The Ultralytics loop has an fp32 and an fp16 row; bf16 and int8 would repeat fp32's."""
    return "ultralytics" in args.references and plan.precision in ("fp32", "fp16")
