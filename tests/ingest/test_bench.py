"""The ingest benchmark runs end to end on a real generated sub-stream and writes its JSON."""

from __future__ import annotations

import json

import pytest

from app.ingest.bench import main

pytestmark = pytest.mark.streams


def test_bench_measures_the_sub_stream(tmp_path, stream_tools, capsys):
    out = tmp_path / "ingest.json"
    assert main(["--seconds", "3", "--only", "sub 640x360", "--workdir", str(tmp_path / "src"),
                 "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [r["fps"] for r in rows] == [1, 2, 5] and {r["source"] for r in rows} == {"sub-640x360p15.mp4"}
    for row in rows:
        assert 0 < row["ffmpeg_cpu"] < 2 and row["total_cpu"] >= row["ffmpeg_cpu"]
        assert abs(row["frames"] - row["fps"] * row["seconds"]) <= 2  # sampled as asked
        assert row["streams_per_core"] == pytest.approx(1 / row["total_cpu"], rel=0.02)
    assert "streams/core" in capsys.readouterr().out
