"""Before the GPU run: name every missing piece in one message (standard library only).

    python3 scripts/device_preflight.py [--device-dir .device] [--device cuda:0] [--dry-run [--repo .]]

On the lent machine it checks that every module the run imports is importable (after the
wheelhouse was installed), that the carried model, images and CPU reference are there, and
that torch sees the GPU; ONNX Runtime without a GPU provider is a note (those rows are
reported "not available on this machine"), not a failure. ``--dry-run`` (on the machine that
builds the tree) checks the wheelhouse holds a wheel for every distribution in
scripts/device-wheels.txt instead of importing, and skips the GPU; with ``--repo`` it also adds
what the device tool sends besides (the repository's tracked and untracked-not-ignored files)
to the carried tree and checks the sum against the tool's 64 MiB.
Exit 0 when the run can go, 1 otherwise.
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent
CARRY_LIMIT = 64 * 1024 * 1024
MODULES = {  # module -> distribution, for everything gpu-bench.sh runs
    "torch": "torch", "cv2": "opencv-python-headless", "numpy": "numpy", "httpx": "httpx", "yaml": "pyyaml",
    "prometheus_client": "prometheus-client", "psutil": "psutil", "tqdm": "tqdm", "matplotlib": "matplotlib",
    "onnxruntime": "onnxruntime", "ultralytics": "ultralytics", "fastapi": "fastapi", "pydantic": "pydantic",
    "pydantic_settings": "pydantic-settings", "uvicorn": "uvicorn", "multipart": "python-multipart",
    "sqlalchemy": "sqlalchemy",
    # rules on (gpu-node.sh): the event store's migrations, the site file's writer, the tracker's
    # assignment, MQTT. PyAV is not here: with CAMPUSGUARD_CLIPS=false nothing imports it.
    "alembic": "alembic", "mako": "mako", "ruamel.yaml": "ruamel.yaml", "lap": "lap", "paho": "paho-mqtt",
}


def importable(module: str) -> bool:
    """find_spec without the ModuleNotFoundError a dotted name raises when its parent is missing."""
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


def wheel_names(folder: Path) -> set[str]:
    return {re.sub(r"[-_.]+", "_", w.name.split("-")[0]).lower() for w in folder.glob("*.whl")}


def listed_distributions() -> list[str]:
    lines = (SCRIPTS / "device-wheels.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.strip() and not line.startswith("#")]


def tree_bytes(repo: Path) -> int:
    """What the device tool sends of the repository: tracked and untracked-not-ignored files."""
    import subprocess

    proc = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                          capture_output=True, check=True)
    paths = (repo / name for name in proc.stdout.decode().split("\0") if name)
    return sum(p.stat().st_size for p in paths if p.is_file() and not p.is_symlink())


def check(device_dir: Path, device: str, dry_run: bool, repo: Path | None = None) -> tuple[list[str], list[str]]:
    """(missing pieces, notes)."""
    missing: list[str] = []
    notes: list[str] = []
    if sys.version_info < (3, 10):
        missing.append(f"Python >= 3.10 (this is {sys.version.split()[0]})")
    if dry_run:
        have = wheel_names(device_dir / "wheels")
        lacking = [d for d in listed_distributions() if re.sub(r"[-_.]+", "_", d).lower() not in have]
        if lacking:
            missing.append(f"wheels in {device_dir / 'wheels'}: {', '.join(lacking)}")
        size = sum(p.stat().st_size for p in device_dir.rglob("*") if p.is_file()) if device_dir.is_dir() else 0
        tree = tree_bytes(repo) if repo is not None else 0
        if size + tree >= CARRY_LIMIT:
            missing.append(f"{device_dir} and the working tree under 64 MiB together (they are "
                           f"{size / 2**20:.1f} + {tree / 2**20:.1f} MiB)")
        notes.append(f"carried tree {device_dir}: {size / 2**20:.1f} MiB"
                     + (f" + working tree {tree / 2**20:.1f} MiB = {(size + tree) / 2**20:.1f} MiB" if repo else "")
                     + " of 64 MiB")
    else:
        lacking = sorted({dist for module, dist in MODULES.items() if not importable(module)})
        if lacking:
            missing.append(f"Python packages: {', '.join(lacking)} (install {device_dir}/wheels with "
                           "pip install --no-index --no-deps --target DIR and put DIR on PYTHONPATH)")
    models = sorted((device_dir / "models").glob("*.pt")) if (device_dir / "models").is_dir() else []
    if not models:
        missing.append(f"model weights in {device_dir / 'models'} (scripts/device-wheelhouse.sh copies them)")
    images = [p for p in (device_dir / "images").glob("*") if p.suffix.lower() in {".jpg", ".jpeg", ".png"}] \
        if (device_dir / "images").is_dir() else []
    if not images:
        missing.append(f"images in {device_dir / 'images'}")
    if not (device_dir / "cpu-reference.json").is_file():
        missing.append(f"CPU reference {device_dir / 'cpu-reference.json'} (campusguard parity --write-reference)")
    if dry_run or device == "cpu":
        notes.append(f"GPU: not checked ({'dry run' if dry_run else 'device cpu'})")
    elif importlib.util.find_spec("torch") is not None:
        import torch

        index = int(device.split(":")[1]) if ":" in device else 0
        if not torch.cuda.is_available() or torch.cuda.device_count() <= index:
            missing.append(f"a GPU for {device} (torch {torch.__version__} sees {torch.cuda.device_count()} device(s))")
        else:
            notes.append(f"GPU: {torch.cuda.get_device_name(index)}, torch {torch.__version__}")
    if not dry_run and importlib.util.find_spec("onnxruntime") is not None:
        import onnxruntime as ort

        gpu = {"CUDAExecutionProvider", "MIGraphXExecutionProvider", "ROCMExecutionProvider"}
        if not gpu & set(ort.get_available_providers()):
            notes.append(f"ONNX rows: not available on this machine (onnxruntime {ort.__version__} offers "
                         f"{ort.get_available_providers()})")
    return missing, notes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device-dir", type=Path, default=Path(".device"))
    parser.add_argument("--device", default="cuda:0")
    parser.add_argument("--dry-run", action="store_true")
    parser.add_argument("--repo", type=Path, default=None, help="dry run: add this checkout's travelling files")
    args = parser.parse_args(argv)
    missing, notes = check(args.device_dir, args.device, args.dry_run, args.repo)
    for note in notes:
        print(f"preflight: {note}")
    if missing:
        print("preflight: cannot run, missing: " + "; ".join(missing), file=sys.stderr)
        return 1
    print("preflight: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
