"""`make lock`: resolve pyproject.toml into one hashed lock per install target (uv).

    .tools/lock/bin/python scripts/lock.py            # rewrite requirements/locks/*.txt, keeping locked versions
    .tools/lock/bin/python scripts/lock.py --upgrade  # the same, every package moved to its newest allowed release
    python3 scripts/lock.py --check                   # no network: exit 1 naming each lock pyproject.toml outgrew

Why one lock per target: the dev/CPU venv (`make setup`), the CUDA image and the ROCm image
run different Pythons and different torch/ONNX Runtime builds, so one resolve cannot serve
them all. Each lock is generated from pyproject.toml (the dependency lists and the extras
the target installs) plus the small pin files of requirements/, never edited by hand, and
its header records a sha256 of exactly those inputs (`# inputs-sha256:`):
tests/deploy/test_locks.py recomputes it, so a change to pyproject.toml or a pin file
without `make lock` fails the tests. Every file in a lock carries a sha256 (`pip install
--require-hashes`). What a target takes from outside PyPI (the ROCm base image's torch,
AMD's ROCm builds of torch/torchvision) is excluded from its lock and listed in its header.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
LOCK_DIR = "requirements/locks"
# Every image is Ubuntu 24.04 (glibc 2.39); manylinux_2_28 wheels run on it and on the dev machines.
PLATFORM = "x86_64-manylinux_2_28"
# The ROCm image alone: onnxruntime-migraphx is published for manylinux_2_34 only (glibc 2.39 runs it).
ROCM_PLATFORM = "x86_64-manylinux_2_34"
DIGEST_PREFIX = "# inputs-sha256: "


@dataclass(frozen=True)
class Target:
    """One install target: which Python, which extras, which pins, and what it takes from elsewhere."""

    name: str
    python: str
    extras: tuple[str, ...]
    purpose: str
    requirements: tuple[str, ...] = ()  # pin files installed as well (e.g. onnxruntime-gpu)
    constraints: tuple[str, ...] = ()  # pin files that only bound versions
    exclude: tuple[str, ...] = ()  # provided outside this lock: dropped from the resolve with their own dependencies
    no_emit: tuple[str, ...] = ()  # resolved as a stand-in for a wheel from elsewhere (its dependencies stay), not written
    not_hashed: tuple[str, ...] = ()  # what the target installs from elsewhere, for the header
    platform: str = PLATFORM  # the wheels' platform tag the resolve targets


TARGETS: tuple[Target, ...] = (
    Target("dev", "3.11", ("dev", "nvidia", "openvino"), "make setup: CPU nodes, development and CI (Python 3.11)",
           constraints=("requirements/cpu.txt",)),
    Target("cuda", "3.12", ("nvidia",), "Dockerfile.cuda (nvidia/cuda 12.8 on Ubuntu 24.04, Python 3.12)",
           requirements=("requirements/cuda.txt",), exclude=("onnxruntime",)),
    Target("rocm", "3.12", ("amd",), "Dockerfile.rocm (rocm/pytorch, ROCm 7.2.4, on Ubuntu 24.04, Python 3.12), "
           "installed with --no-deps", requirements=("requirements/rocm.txt",),
           constraints=("requirements/rocm-constraints.txt",), exclude=("torch", "torchvision", "onnxruntime"),
           not_hashed=("torch, torchvision and their dependencies: the base image's ROCm builds, kept as they are",),
           platform=ROCM_PLATFORM),
)


def lock_path(target: Target, root: Path = ROOT) -> Path:
    return root / LOCK_DIR / f"{target.name}.txt"


def inputs_digest(target: Target, root: Path = ROOT) -> str:
    """sha256 of everything the lock is resolved from: pyproject's dependency lists for the
    target's extras, the pin files, and the target itself (Python, platform, exclusions)."""
    pyproject = tomllib.loads((root / "pyproject.toml").read_text())
    project = pyproject["project"]
    optional = project.get("optional-dependencies", {})
    data = {
        "build-system": pyproject["build-system"]["requires"],
        "requires-python": project.get("requires-python"),
        "dependencies": project["dependencies"],
        "extras": {extra: optional[extra] for extra in target.extras},
        "files": {path: (root / path).read_text() for path in (*target.requirements, *target.constraints)},
        "target": [target.python, target.platform, sorted(target.exclude), sorted(target.no_emit)],
    }
    return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()


def recorded_digest(path: Path) -> str | None:
    """The `# inputs-sha256:` a lock's header records (None: no lock, or no such line)."""
    if not path.exists():
        return None
    for line in path.read_text().splitlines():
        if line.startswith(DIGEST_PREFIX):
            return line[len(DIGEST_PREFIX):].split()[0]
        if line and not line.startswith("#"):
            return None
    return None


def header(target: Target, digest: str) -> str:
    lines = [f"# Lock for {target.purpose}.",
             f"# Generated by `make lock` (scripts/lock.py: uv pip compile of pyproject.toml, extras {', '.join(target.extras)};"
             f" Python {target.python}, {target.platform}); never edit by hand.",
             f"{DIGEST_PREFIX}{digest}"]
    if target.exclude:
        lines.append(f"# Excluded from the resolve (replaced, or provided elsewhere): {', '.join(target.exclude)}")
    if target.no_emit:
        lines.append(f"# Resolved as a stand-in, not listed: {', '.join(target.no_emit)} (its dependencies are listed)")
    lines += [f"# Not hashed here: {item}" for item in target.not_hashed]
    return "\n".join(lines) + "\n"


def compile_cmd(uv: str, target: Target, out: Path, extra_inputs: list[Path], upgrade: bool) -> list[str]:
    """uv's arguments; extra_inputs are the generated build-system file and the exclusions."""
    build, *overrides = extra_inputs
    cmd = [uv, "pip", "compile", "--no-config", "--quiet", "--native-tls", "--generate-hashes",
           "--python-version", target.python, "--python-platform", target.platform,
           "--custom-compile-command", "make lock", "pyproject.toml", *target.requirements, str(build)]
    for extra in target.extras:
        cmd += ["--extra", extra]
    for path in target.constraints:
        cmd += ["-c", path]
    for path in overrides:
        cmd += ["--override", str(path)]
    for name in target.no_emit:
        cmd += ["--no-emit-package", name]
    if upgrade:
        cmd.append("--upgrade")
    return [*cmd, "-o", str(out)]


def lock_one(uv: str, target: Target, upgrade: bool) -> tuple[int, bool]:
    """Resolve one target into its lock; returns (packages, whether the file changed)."""
    path = lock_path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    before = path.read_text() if path.exists() else ""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / path.name
        out.write_text(before)  # uv keeps the versions already locked unless --upgrade
        # the build backend too, so the project installs with --no-build-isolation from hashed files only
        build = Path(tmp) / "build-system.txt"
        build.write_text("".join(f"{req}\n" for req in tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]))
        inputs = [build]
        if target.exclude:  # an override with a marker that never holds drops the package and its dependencies
            inputs.append(Path(tmp) / "exclude.txt")
            inputs[-1].write_text("".join(f"{name} ; sys_platform == 'never'\n" for name in target.exclude))
        proc = subprocess.run(compile_cmd(uv, target, out, inputs, upgrade), cwd=ROOT, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SystemExit(f"lock.py: resolving {target.name} failed:\n{proc.stderr.strip()}")
        body = out.read_text().replace(f"-r {build}", "pyproject.toml (build-system)")  # no temp path in the lock
        text = header(target, inputs_digest(target)) + body
    path.write_text(text)
    return sum(1 for line in text.splitlines() if "==" in line and not line.startswith(("#", " "))), text != before


def check() -> int:
    stale = [f"{LOCK_DIR}/{t.name}.txt" for t in TARGETS if recorded_digest(lock_path(t)) != inputs_digest(t)]
    for path in stale:
        print(f"stale or missing: {path} (pyproject.toml or a pin file changed): run `make lock`")
    if not stale:
        print(f"every lock matches pyproject.toml ({', '.join(t.name for t in TARGETS)})")
    return 1 if stale else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare the recorded input digests (no network)")
    parser.add_argument("--upgrade", action="store_true", help="move every package to its newest allowed release")
    parser.add_argument("--target", action="append", choices=[t.name for t in TARGETS], help="only these (default: all)")
    args = parser.parse_args(argv)
    if args.check:
        return check()
    from rich.console import Console
    from rich.table import Table

    uv = os.environ.get("UV") or shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    if uv is None:
        raise SystemExit("lock.py: no uv; run `make lock` (it installs .tools/lock from requirements/tools/lock.txt)")
    console = Console()
    table = Table(title=f"make lock: {LOCK_DIR}/<lock>.txt")
    for column in ("lock", "Python", "extras", "packages", "changed", "seconds"):
        table.add_column(column)
    for target in [t for t in TARGETS if not args.target or t.name in args.target]:
        start = time.monotonic()
        with console.status(f"resolving {target.name} (Python {target.python}, {target.platform})"):
            count, changed = lock_one(uv, target, args.upgrade)
        table.add_row(target.name, target.python, ",".join(target.extras), str(count),
                      "yes" if changed else "no", f"{time.monotonic() - start:.1f}")
    console.print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
