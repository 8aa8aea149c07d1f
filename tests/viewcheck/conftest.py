"""Fixtures for the view-check tests: the labelled scenarios run once per session (at 0.5
fps, 320 px: every frame is a check), shared by the tests that read their outcome."""

from __future__ import annotations

from dataclasses import replace

import pytest

from app.tooling.viewcheck.evaluate import SequenceResult, run_sequence
from app.tooling.viewcheck.sequences import build
from app.rules.site.viewchecks import ViewCheckOptions


@pytest.fixture(scope="session")
def scenario_result(dataset):
    """``scenario_result(name)``: the tuned part's first sequence of that scenario, run."""
    cache: dict[str, SequenceResult] = {}

    def run(name: str) -> SequenceResult:
        if name not in cache:
            seq = next(s for s in build(dataset, scenarios=[name]) if s.part == "tuned")
            cache[name] = run_sequence(replace(seq, fps=0.5), ViewCheckOptions())
        return cache[name]
    return run
