"""Aggregate sequence results into what the report prints and writes: per part (tuned,
set aside), per scenario and per kind, the confusion table, and whether the issue's
targets are met (every tamper sequence alarms within its deadline with the right kind,
no alarm at all on the hard negatives)."""

from __future__ import annotations

import statistics
from collections import Counter
from typing import Any

from app.rules.site.viewchecks import KINDS, ViewCheckOptions
from app.tooling.viewcheck.evaluate import LABELS, SequenceResult, deadline

PARTS = ("tuned", "set_aside", "fresh")


def _stats(values: list[float]) -> dict[str, float | None]:
    return {"median": statistics.median(values) if values else None, "max": max(values) if values else None}


def scenario_rows(results: list[SequenceResult], options: ViewCheckOptions) -> list[dict[str, Any]]:
    rows = []
    for scenario in dict.fromkeys(r.scenario for r in results):
        rs = [r for r in results if r.scenario == scenario]
        first = rs[0]
        rows.append({
            "scenario": scenario, "category": first.category, "kind": first.kind,
            "deadline_s": deadline(first.kind, options) if first.kind else None,
            "sequences": len(rs), "passed": sum(r.passed for r in rs),
            "time_to_alarm_s": _stats([r.time_to_alarm for r in rs if r.time_to_alarm is not None]),
            "time_to_clear_s": _stats([r.time_to_clear for r in rs if r.time_to_clear is not None]),
            "missed": sum(r.category == "tamper" and r.time_to_alarm is None for r in rs),
            "false_alarms": sum(len(r.false_alarms) for r in rs),
            "frames": sum(r.frames for r in rs), "checks": sum(r.checks for r in rs)})
    return rows


def confusion(results: list[SequenceResult]) -> dict[str, dict[str, int]]:
    total: Counter = Counter()
    for r in results:
        total.update(r.confusion)
    return {truth: {rep: total[(truth, rep)] for rep in LABELS} for truth in LABELS}


def kind_rows(results: list[SequenceResult]) -> list[dict[str, Any]]:
    """Per kind: sequences that should raise it and did in time, missed, false alarms of
    that kind anywhere, and frame-level recall / precision from the confusion table."""
    table = confusion(results)
    rows = []
    for kind in KINDS:
        should = [r for r in results if r.kind == kind]
        reported = sum(table[t][kind] for t in LABELS)
        rows.append({
            "kind": kind, "sequences": len(should), "raised_in_time": sum(r.time_to_alarm is not None for r in should),
            "false_alarms": sum(k == kind for r in results for k, _ in r.false_alarms),
            "frame_recall": table[kind][kind] / max(1, sum(table[kind].values())) if should else None,
            "frame_precision": table[kind][kind] / reported if reported else None})
    return rows


def part_summary(results: list[SequenceResult], options: ViewCheckOptions) -> dict[str, Any]:
    tampers = [r for r in results if r.category == "tamper"]
    negatives = [r for r in results if r.category == "negative"]
    return {
        "sequences": len(results), "frames": sum(r.frames for r in results),
        "tamper_sequences": len(tampers), "tamper_in_time": sum(r.passed for r in tampers),
        "negative_sequences": len(negatives),
        "negative_alarms": sum(len(r.false_alarms) for r in negatives),
        "tamper_false_alarms": sum(len(r.false_alarms) for r in tampers),
        "targets_met": all(r.passed for r in results),
        "scenarios": scenario_rows(results, options), "kinds": kind_rows(results), "confusion": confusion(results)}


def sequence_record(r: SequenceResult) -> dict[str, Any]:
    return {"name": r.name, "scenario": r.scenario, "part": r.part, "fps": r.fps, "frames": r.frames,
            "checks": r.checks, "passed": r.passed, "alarms": r.alarms, "ends": r.ends,
            "time_to_alarm_s": r.time_to_alarm, "time_to_clear_s": r.time_to_clear,
            "false_alarms": r.false_alarms}
