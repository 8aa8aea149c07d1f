"""The test set's split rule, the report command (tables and JSON) and the benchmark."""

from __future__ import annotations

import json
import os

import cv2
import pytest

from app.tooling.viewcheck.bench import bench
from app.tooling.viewcheck.scenarios import SCENARIOS
from app.tooling.viewcheck.sequences import build
from app.cli import main as campusguard
from app.tooling.viewcheck.report import main


def test_every_third_source_image_is_set_aside_and_fresh_images_are_new(dataset):
    seqs = build(dataset)
    assert len(seqs) == 6 * len(SCENARIOS) and len({s.source for s in seqs}) == len(seqs)
    aside = [s for s in seqs if s.part == "set_aside"]
    assert len(aside) == len(seqs) // 3 and all(s.index % 3 == 2 for s in aside)
    assert {s.scenario for s in aside} == set(SCENARIOS)  # every scenario has set-aside sequences
    fresh = build(dataset, fresh=True)
    assert {s.part for s in fresh} == {"fresh"} and not {s.source for s in fresh} & {s.source for s in seqs}


def test_frames_carry_capture_times_truth_and_real_boxes(dataset):
    seq = next(s for s in build(dataset, scenarios=["frozen"]) if s.part == "tuned")
    frames = list(seq.frames())
    assert [f.t for f in frames[:3]] == [0.0, 1.0, 2.0] and frames[0].image.shape == (240, 320, 3)
    assert {f.truth for f in frames} == {"healthy", "frozen"}
    frozen = [f for f in frames if f.truth == "frozen"]
    assert all(f.image is frozen[0].image for f in frozen)  # byte for byte the same picture
    assert any(f.boxes for f in frames)  # people walk past, with their boxes


@pytest.mark.slow  # the whole report over two scenarios of the labelled set: 25 s alone
def test_the_report_prints_both_parts_and_writes_json(dataset, tmp_path, capsys):
    out, md = tmp_path / "report.json", tmp_path / "report.md"
    affinity, threads = os.sched_getaffinity(0), cv2.getNumThreads()
    code = main(["--dataset", str(dataset), "--scenarios", "covered_tape,lights", "--per-scenario", "3",
                 "--bench-repeat", "2", "--no-progress", "--json", str(out), "--markdown", str(md)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    for title in ("tuned part", "set-aside part", "fresh part", "per kind", "true state (rows)", "targets met",
                  "cost per check, ms on one core"):
        assert title in printed
    assert os.sched_getaffinity(0) == affinity and cv2.getNumThreads() == threads  # pinned only while timing
    doc = json.loads(out.read_text())
    assert doc["targets_met"] is True and set(doc["parts"]) == {"tuned", "set_aside", "fresh"}
    assert doc["parts"]["set_aside"]["sequences"] == 2 and doc["parts"]["tuned"]["sequences"] == 4
    covered = next(k for k in doc["parts"]["tuned"]["kinds"] if k["kind"] == "covered")
    assert covered["sequences"] == 2 and covered["raised_in_time"] == 2 and covered["false_alarms"] == 0
    assert doc["parts"]["tuned"]["confusion"]["covered"]["covered"] > 0
    assert doc["options"]["persist_s"] == 10.0
    assert {t["size"] for t in doc["benchmark"]["timings"]} == {"320x240", "640x480", "1280x720", "1920x1080"}
    text = md.read_text()
    assert "#### Set-aside part: 2 sequences" in text and "| covered_tape | covered within 15 s | 1/1 |" in text
    assert "| check: healthy frame |" in text


def test_bad_arguments_exit_2(dataset, tmp_path):
    """Through ``campusguard viewcheck-report`` (the command table) and the module alike."""
    assert campusguard(["viewcheck-report", "--dataset", str(dataset), "--scenarios", "smoke", "--no-bench"]) == 2
    assert main(["--dataset", str(dataset), "--scenarios", "smoke", "--no-bench"]) == 2
    assert main(["--dataset", str(dataset), "--sensitivity", "max", "--no-bench"]) == 2
    assert main(["--dataset", str(tmp_path), "--no-bench"]) == 2  # no images there


def test_the_benchmark_times_every_step(dataset):
    timings = bench(dataset, repeat=3, sizes=((320, 240), (1280, 720)))
    steps = {t.step for t in timings}
    assert {"check: healthy frame", "check: moved frame (slowest path)", "frame between checks",
            "moved: motion search (gated)", "frozen"} <= steps
    assert len(timings) == 2 * len(steps) and all(t.median_ms > 0 for t in timings)
