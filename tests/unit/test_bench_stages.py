"""`campusguard bench --stage preprocess` end to end on real images (mechanics, not speed)."""

from __future__ import annotations

import json

from app.cli import main


def test_preprocess_stage_writes_json_with_the_reductions(dataset, tmp_path, capsys):
    code = main(["bench", "--stage", "preprocess", "--images", str(dataset / "images"), "--stage-seconds", "0.6",
                 "--rounds", "1", "--out", str(tmp_path)])
    assert code == 0
    saved = json.loads((tmp_path / "stage-preprocess.json").read_text())
    rows = saved["rows"]
    assert [(r["frames"], r["reduction"]) for r in rows] == [
        ("720p", 1), ("720p", 2), ("1080p", 1), ("1080p", 2), ("4K", 1), ("4K", 4)]
    assert all(r["shape"] == "384x640" and r["img_s"] > 0 for r in rows)
    assert "load_average_start" in saved["meta"] and saved["meta"]["threads"] == 1
    assert "bench --stage preprocess" in capsys.readouterr().out


def test_camera_frames_have_the_cameras_size(dataset):
    import cv2
    import numpy as np

    from app.inference.vision.decode import image_files
    from app.tooling.bench.camera_frames import camera_jpegs

    (frame,) = camera_jpegs(image_files(dataset / "images"), (1920, 1080), count=1)
    assert cv2.imdecode(np.frombuffer(frame, np.uint8), cv2.IMREAD_COLOR).shape == (1080, 1920, 3)


def test_preprocess_stage_times_the_device_decoder_where_asked(dataset, tmp_path):
    """`--stage preprocess --device cuda:N` adds the device decoder's batch (`--device-decode` here, on the CPU)."""
    code = main(["bench", "--stage", "preprocess", "--device-decode", "--images", str(dataset / "images"),
                 "--stage-seconds", "0.9", "--rounds", "1", "--stage-shapes", "", "--imgsz", "384x640",
                 "--out", str(tmp_path)])
    assert code == 0
    rows = json.loads((tmp_path / "stage-preprocess.json").read_text())["rows"]
    device = [r for r in rows if r["variant"].startswith("device decode")]
    assert [r["frames"] for r in device] == ["720p", "1080p", "4K"]
    assert all(r["img_s"] > 0 and r["cpu_ms_per_img"] > 0 and r["shape"] == "384x640" for r in device)
