"""GPU parity check: box matching, and the command end to end on the CPU with the real model."""

from __future__ import annotations

import json
import shutil

import pytest

from app.tooling.bench.parity import compare, match
from app.cli import main

REF = {"a.jpg": [[10, 10, 50, 50, 0.9, 0], [60, 60, 100, 100, 0.8, 2]], "b.jpg": [[0, 0, 20, 20, 0.5, 1]]}


def test_identical_detections_pass():
    result = compare(REF, REF)
    assert result.recall == result.box_precision == 1.0 and result.passed and result.max_conf_diff == 0


def test_fp16_jitter_still_matches():
    jitter = {k: [[x + 0.7, y - 0.5, x2 + 0.3, y2, c - 0.01, cls] for x, y, x2, y2, c, cls in v] for k, v in REF.items()}
    result = compare(REF, jitter)
    assert result.passed and result.mean_iou > 0.9 and result.max_conf_diff == pytest.approx(0.01)


def test_wrong_class_missing_and_extra_boxes_fail():
    assert match([[0, 0, 10, 10, 0.9, 0]], [[0, 0, 10, 10, 0.9, 1]]) == []
    result = compare(REF, {"a.jpg": REF["a.jpg"] + [[200, 200, 220, 220, 0.6, 5]]})  # b.jpg lost, one extra
    assert result.recall == pytest.approx(2 / 3) and result.box_precision == pytest.approx(2 / 3)
    assert not result.passed


def test_one_to_one_matching():
    # two found boxes on one reference box: one match, one extra
    pairs = match([[0, 0, 10, 10, 0.9, 0]], [[0, 0, 10, 10, 0.9, 0], [0, 0, 10, 11, 0.8, 0]])
    assert len(pairs) == 1 and pairs[0][:2] == (0, 0)


def test_parity_command_against_its_own_reference(tmp_path, weights, dataset):
    images = tmp_path / "images"
    images.mkdir()
    for p in sorted((dataset / "images").glob("*.jpg"))[:3]:
        shutil.copy(p, images)
    ref = tmp_path / "ref.json"
    common = ["--weights", str(weights), "--images", str(images), "--imgsz", "320", "--threads", "1"]
    assert main(["parity", *common, "--write-reference", str(ref)]) == 0
    assert len(json.loads(ref.read_text())["detections"]) == 3
    assert main(["parity", *common, "--reference", str(ref), "--out", str(tmp_path / "out")]) == 0
    row = json.loads((tmp_path / "out" / "parity.json").read_text())["rows"][0]
    assert row["recall"] == 1.0 and row["passed"] and row["precision"] == "fp32"
    # a reference from another model size is not matched: the check can fail
    doctored = json.loads(ref.read_text())
    doctored["detections"] = {k: [[1, 1, 5, 5, 0.9, 7]] * 3 for k in doctored["detections"]}
    ref.write_text(json.dumps(doctored))
    assert main(["parity", *common, "--reference", str(ref), "--out", str(tmp_path / "out")]) == 1
