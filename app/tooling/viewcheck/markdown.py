"""The report's results as Markdown tables, for docs/rules.md ("Camera view checks") (``--markdown PATH``)."""

from __future__ import annotations

from typing import Any

from app.tooling.viewcheck.evaluate import LABELS

TITLES = {"tuned": "Tuned part", "set_aside": "Set-aside part", "fresh": "Fresh part"}


def _n(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
            *("| " + " | ".join(row) + " |" for row in rows)]


def part_markdown(part: str, s: dict[str, Any]) -> list[str]:
    out = [f"#### {TITLES.get(part, part)}: {s['sequences']} sequences, {s['frames']} frames", ""]
    rows = []
    for r in s["scenarios"]:
        expect = f"{r['kind']} within {r['deadline_s']:.0f} s" if r["kind"] else "no alarm"
        tta = r["time_to_alarm_s"]
        rows.append([r["scenario"], expect, f"{r['passed']}/{r['sequences']}",
                     f"{_n(tta['median'])} / {_n(tta['max'])}" if r["kind"] else "-",
                     _n(r["time_to_clear_s"]["max"]) if r["kind"] else "-", str(r["false_alarms"])])
    out += _table(["scenario", "expected", "met", "time to alarm s (median / max)", "time to clear s (max)",
                   "other alarms"], rows)
    out += ["", "Frames, true state (rows) against the problem reported (columns); frames in which a "
            "correct monitor may still be catching up are left out:", ""]
    out += _table(["true \\ reported", *LABELS],
                  [[t, *(str(s["confusion"][t][r]) for r in LABELS)] for t in LABELS])
    return out + [""]


def bench_markdown(timings: list[dict[str, Any]], pinned: str) -> list[str]:
    sizes = list(dict.fromkeys(t["size"] for t in timings))
    rows = []
    for step in dict.fromkeys(t["step"] for t in timings):
        cells = {t["size"]: f"{t['median_ms']:.2f}" for t in timings if t["step"] == step}
        rows.append([step, *(cells.get(size, "-") for size in sizes)])
    return [f"Median ms per call on one core ({pinned}, OpenCV on one thread):", "",
            *_table(["step", *sizes], rows), ""]


def report_markdown(doc: dict[str, Any]) -> str:
    lines: list[str] = []
    for part, summary in doc["parts"].items():
        lines += part_markdown(part, summary)
    if doc["benchmark"]["timings"]:
        lines += bench_markdown(doc["benchmark"]["timings"], doc["benchmark"]["pinned"])
    return "\n".join(lines)
