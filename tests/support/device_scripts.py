"""The GPU machine's scripts as the tests run them here: a carried .device/ tree of placeholder
files with real names, and gpu-node.sh's dry run (tests/unit/test_device_scripts.py,
tests/unit/test_bench_frontends.py)."""

from __future__ import annotations

import importlib.metadata as md
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

SCRIPTS = REPO / "scripts"


def listed() -> list[str]:
    return [l.strip() for l in (SCRIPTS / "device-wheels.txt").read_text().splitlines() if l.strip() and l[0] != "#"]


def carried_tree(root: Path, wheels: list[str]) -> Path:
    """A .device/ as device-wheelhouse.sh leaves it (placeholder files, real names)."""
    (root / "wheels").mkdir(parents=True)
    for name in wheels:
        (root / "wheels" / f"{name.replace('-', '_')}-{md.version(name)}-py3-none-any.whl").write_bytes(b"")
    (root / "models").mkdir()
    (root / "models" / "yolov8n.pt").write_bytes(b"weights")
    (root / "images").mkdir()
    (root / "images" / "a.jpg").write_bytes(b"jpeg")
    (root / "cpu-reference.json").write_text("{}")
    return root


def node_dry_run(tmp_path, **extra: str) -> subprocess.CompletedProcess:
    root = tmp_path / ".device"
    if not root.exists():
        carried_tree(root, listed())
    env = {**os.environ, "DEVICE_DIR": str(root), "PY": sys.executable, "IMAGES": str(root / "images"),
           "WEIGHTS_N": str(root / "models" / "yolov8n.pt"), "IMAGES_N": "1", **extra}
    env.pop("OUT", None)
    return subprocess.run(["bash", str(SCRIPTS / "gpu-node.sh"), "--dry-run", str(tmp_path / "results")],
                          capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
