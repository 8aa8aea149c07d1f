"""The tables `campusguard bench scale` prints (rich), from its JSON."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table


def _table(title: str, rows: list[dict[str, Any]]) -> Table:
    table = Table(title=title)
    columns = list(rows[0]) if rows else []
    for column in columns:
        table.add_column(column, justify="left" if column in ("case", "path", "note") else "right")
    for row in rows:
        table.add_row(*("–" if row.get(c) is None else str(row.get(c)) for c in columns))
    return table


def print_tables(results: dict[str, Any], console: Console) -> None:
    for key, title in (("events", "GET /events (repository), 50 a page"),
                       ("events_before", "before: count(*) + OFFSET"),
                       ("rules", "rules evaluation (interleaved rounds)"),
                       ("rules_summary", "rules evaluation: median per worker count"),
                       ("replay_rate_workers", "replay evaluation, 1 and 2 workers (interleaved rounds)")):
        if results.get(key):
            console.print(_table(title, results[key]))
    for key, title in (("retention", "retention"), ("replay", "replay reads"), ("replay_rate", "replay evaluation")):
        if results.get(key):
            console.print(_table(title, [{"measure": k, "value": v} for k, v in results[key].items()]))
