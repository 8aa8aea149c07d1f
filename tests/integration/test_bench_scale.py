"""`campusguard bench scale` end to end at a tiny size on the real PostgreSQL: every part
runs, the JSON holds each figure the site-scale issue asks for, and the data it measures is
what it says (counts in the database)."""

from __future__ import annotations

import json

from sqlalchemy import func, select

from app.cli import main
from app.rules.store.db import EventStore
from app.rules.store.schema import events_table, frames_table


def test_bench_scale_tiny_run_on_postgres(tmp_path, pg_url, capsys):
    out = tmp_path / "scale"
    rc = main(["bench", "scale", "--db", pg_url, "--events", "3000", "--cameras", "20", "--days", "3",
               "--frames", "4000", "--frame-cameras", "4", "--replay-sample", "400", "--rules-cameras", "4",
               "--rules-frames", "20", "--rules-rounds", "1", "--out", str(out), "--no-progress"])
    assert rc == 0
    data = json.loads((out / "scale.json").read_text())
    assert data["meta"]["database"].startswith("postgresql")
    cases = {row["case"]: row for row in data["events"]}
    for case in ("default page", "camera", "zone", "rule", "acknowledged=false", "false_positive=true", "one day",
                 "deep page by cursor (90%)"):
        assert cases[case]["n"] == 30 and 0 < cases[case]["p50_ms"] <= cases[case]["p95_ms"]
    cursor = next(row for name, row in cases.items() if name.startswith("cursor to the end"))
    assert cursor["n"] >= 2 and "pages" in cursor["note"]  # ~150 events of one camera, 50 a page
    assert {row["case"] for row in data["events_before"]} >= {"OFFSET 900000 (before)"}
    retention = data["retention"]
    assert retention["deleted_events"] > 0 and retention["events_per_s"] > 0
    assert retention["writer_during_p95_ms"] is not None
    replay = data["replay"]
    assert replay["frames"] == 4000 and replay["chunks"] == 2 and replay["last_chunks_ms"] > 0
    assert data["replay_rate"]["frames"] >= 400 and data["replay_rate"]["frames_per_s"] > 0
    assert [r["workers"] for r in data["replay_rate_workers"]] == [1, 2]
    assert data["replay_rate_workers"][1]["frames"] == data["replay_rate_workers"][0]["frames"]
    assert [r["workers"] for r in data["rules"]] == [1, 2, 1, 2] and all(r["camera_frames"] == 80 for r in data["rules"])
    assert data["rules"][0]["events"] == data["rules"][1]["events"] > 0  # the same frames, the same events
    assert data["rules"][2]["events"] == data["rules"][3]["events"] > 0
    assert [(r["workers"], r["site"]) for r in data["rules_summary"]] == [
        (1, "intrusion+crowd+line"), (2, "intrusion+crowd+line"), (1, "intrusion+crowd, no tracking"),
        (2, "intrusion+crowd, no tracking")] and data["rules_summary"][0]["ratio_to_first"] == 1
    store = EventStore(pg_url, migrate=False)
    try:
        with store.engine.connect() as conn:
            left = conn.execute(select(func.count()).select_from(events_table)).scalar_one()
            frames = conn.execute(select(func.count()).select_from(frames_table)).scalar_one()
    finally:
        store.close()
    assert frames == 4000 and 0 < left < 3000 + 1000  # half the window deleted by retention; writers added some
    assert "GET /events" in capsys.readouterr().out
