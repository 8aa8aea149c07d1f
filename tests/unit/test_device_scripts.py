"""The GPU machine's one-shot runs, checked here without a GPU or a network: the wheelhouse
keeps what it has, the preflight names every missing piece at once, and the dry runs walk
wheelhouse -> preflight -> plan within their budgets (gpu-bench.sh 8 minutes, gpu-node.sh 5)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO
from tests.support.device_scripts import SCRIPTS, carried_tree, listed, node_dry_run


def preflight(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPTS / "device_preflight.py"), *args], capture_output=True,
                          text=True, cwd=REPO)


def test_every_package_the_run_imports_is_either_on_the_device_or_in_the_wheelhouse():
    sys.path.insert(0, str(SCRIPTS))
    try:
        import device_preflight
    finally:
        sys.path.remove(str(SCRIPTS))
    on_device = {"torch", "opencv-python-headless", "numpy", "httpx", "pyyaml", "prometheus-client", "psutil", "tqdm",
                 "matplotlib", "onnxruntime"}  # KINDS.md's package list for nvidia-h200
    norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()  # noqa: E731
    assert {norm(d) for d in device_preflight.MODULES.values()} - on_device <= {norm(d) for d in listed()}


def test_preflight_names_every_missing_piece_in_one_message(tmp_path):
    root = carried_tree(tmp_path / ".device", listed()[2:])  # two wheels short
    (root / "cpu-reference.json").unlink()
    for f in (root / "images").iterdir():
        f.unlink()
    proc = preflight("--device-dir", str(root), "--dry-run")
    assert proc.returncode == 1
    message = [l for l in proc.stderr.splitlines() if l.startswith("preflight: cannot run")]
    assert len(message) == 1
    for piece in (*listed()[:2], "images in", "cpu-reference.json"):
        assert piece in message[0]


def test_preflight_on_a_machine_without_gpu_says_so(tmp_path):
    root = carried_tree(tmp_path / ".device", listed())
    proc = preflight("--device-dir", str(root), "--device", "cuda:0")
    assert proc.returncode == 1 and "a GPU for cuda:0" in proc.stderr
    assert "not available on this machine" in proc.stdout  # CPU-only onnxruntime: a note, not a failure


def test_gpu_bench_dry_run_walks_every_step_and_fits_the_budget(tmp_path):
    root = carried_tree(tmp_path / ".device", listed())
    env = {**os.environ, "DEVICE_DIR": str(root), "PY": sys.executable, "IMAGES": str(root / "images"),
           "WEIGHTS_N": str(root / "models" / "yolov8n.pt"), "IMAGES_N": "1"}
    env.pop("OUT", None)
    proc = subprocess.run(["bash", str(SCRIPTS / "gpu-bench.sh"), "--dry-run", str(tmp_path / "results")],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "(have it)" in out and "preflight: ok" in out and "dry run: nothing measured" in out
    total = int(re.search(r"total\s+(\d+)s of 480s", out).group(1))
    assert total <= 480
    for step in ("bench", "loadtest", "parity"):
        assert re.search(rf"^\s+{step}\s+\d+s", out, re.M), step
    assert "--precisions fp32,fp16" in out and "--sizes n,m,l" in out
    assert not (tmp_path / "results").exists()  # nothing measured, nothing written


def test_gpu_node_dry_run_checks_the_carry_and_plans_issue_40s_call_within_5_minutes(tmp_path):
    proc = node_dry_run(tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert "preflight: ok" in out and "dry run: nothing measured" in out
    # the carry: .device plus the working tree the tool sends, against its 64 MiB
    carried = re.search(r"working tree ([\d.]+) MiB = ([\d.]+) MiB of 64 MiB", out)
    assert carried and 0 < float(carried.group(2)) < 64
    total = int(re.search(r"total\s+(\d+)s of 300s", out).group(1))
    assert total <= 300
    for step in ("setup", "probe", "campus", "parity", "report"):
        assert re.search(rf"^\s+{step}\s+\d+s", out, re.M), step
    # the target workload at two settings: today's design and device decode, rules on, clips off
    campus = [line for line in out.splitlines() if line.strip().startswith("campus")]
    assert len(campus) == 2 and "[baseline: CAMPUSGUARD_DECODE=cpu]" in campus[0] and "CAMPUSGUARD_DECODE=device" in campus[1]
    assert all("--cameras 300 --fps 2" in line and "--size 1920x1080 --quality 90" in line
               and "rules on, clips off" in line for line in campus)
    assert "--decode full --write-reference" in out and "--decode device --reference" in out
    assert "--upscale 1920" in out and "--min-recall 0.98 --min-precision 0.98" in out
    assert "bench --device" not in out and "--sizes" not in out  # the n/m/l table stays in gpu-bench.sh
    assert not (tmp_path / "results").exists()  # nothing measured, nothing written


def test_gpu_node_dry_run_names_a_setting_the_server_would_ignore(tmp_path):
    proc = node_dry_run(tmp_path, SETTINGS="baseline bogus:CAMPUSGUARD_NOT_A_SETTING=1,CAMPUSGUARD_PRECISION=fp32")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    warning = [line for line in proc.stderr.splitlines() if line.startswith("WARNING: setting [bogus]")]
    assert len(warning) == 1 and "CAMPUSGUARD_NOT_A_SETTING" in warning[0]
    assert "CAMPUSGUARD_PRECISION" not in warning[0]  # a real setting is not named


def test_gpu_node_dry_run_refuses_a_plan_over_5_minutes(tmp_path):
    proc = node_dry_run(tmp_path, CAMPUS_BUDGET_S="200")
    assert proc.returncode == 1 and "over 300s" in proc.stderr


def test_preflight_counts_the_working_tree_against_the_carry_limit(tmp_path):
    root = carried_tree(tmp_path / ".device", listed())
    (root / "images" / "big.jpg").write_bytes(b"x" * (40 * 2**20))
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "tracked.bin").write_bytes(b"y" * (30 * 2**20))  # untracked, not ignored: it travels
    (repo / ".gitignore").write_text("ignored.bin\n")
    (repo / "ignored.bin").write_bytes(b"z" * (30 * 2**20))  # ignored: it stays
    proc = preflight("--device-dir", str(root), "--dry-run", "--repo", str(repo))
    assert proc.returncode == 1 and "under 64 MiB together" in proc.stderr
    (repo / "tracked.bin").unlink()
    proc = preflight("--device-dir", str(root), "--dry-run", "--repo", str(repo))
    assert proc.returncode == 0, proc.stderr


def fake_tool(bin_dir: Path, name: str, output: str) -> None:
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / name).write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}\nEOF\n")
    (bin_dir / name).chmod(0o755)


def test_decode_probe_reports_the_engines_the_driver_exposes_and_the_cpu_decode_rate(tmp_path):
    """Step 1 of gpu-node.sh on this CPU machine, with an nvidia-smi that lists NVDEC but shows
    the JPEG engine as N/A (a VM that hides it): the JSON says exactly that, decodes real 1080p
    frames on the CPU, and reports the GPU decode as not possible rather than failing."""
    images = Path(os.environ.get("CAMPUSGUARD_TEST_DATASET", REPO.parent / "shared/datasets/coco-val128")) / "images"
    fake_tool(tmp_path / "bin", "nvidia-smi", "==============NVSMI LOG==============\n    Utilization\n"
              "        Gpu                               : 0 %\n        Encoder                           : 0 %\n"
              "        Decoder                           : 0 %\n        JPEG                              : N/A\n")
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}"}
    out = tmp_path / "probe.json"
    proc = subprocess.run([sys.executable, str(SCRIPTS / "device_decode_probe.py"), "--images", str(images),
                           "--out", str(out), "--seconds", "0.2", "--frames", "2"],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert proc.returncode == 0, proc.stderr
    import json

    report = json.loads(out.read_text())
    assert report["engines"]["exposes_nvdec"] is True and report["engines"]["exposes_nvjpg"] is False
    stage = report["decode_stage"]
    assert stage["frame"] == "1920x1080 q90" and stage["frame_bytes_mean"] > 100_000
    assert stage["cpu_opencv_one_thread"]["frames_per_s"] > 0
    assert report["torchvision_device_decode"] is False  # no GPU here: said, not crashed
    assert "NVDEC exposed True, NVJPG exposed False" in proc.stdout
