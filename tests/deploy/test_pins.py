"""deploy/scripts/pin-images.sh and renovate.json: digests written at the site, kept current.

The script runs on a copy of the files it edits, with a stand-in resolver (DIGEST_CMD) that
prints a digest derived from the reference: every base and service image gets its digest next
to its tag (Dockerfiles, compose, kustomize `digest:`), a second run changes nothing, and a
reference the resolver cannot resolve stops it with the image named and no file changed.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import subprocess
from pathlib import Path

from tests.deploy.conftest import DEPLOY, REPO

FILES = ["Dockerfile.rocm", "Dockerfile.cuda", "deploy/docker-compose.yml", "deploy/k8s/base/kustomization.yaml",
         "deploy/k8s/overlays/nvidia/kustomization.yaml"]


def copy_tree(tmp: Path) -> Path:
    for name in FILES:
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / name, tmp / name)
    return tmp


def fake_resolver(tmp: Path, refuse: str = "") -> Path:
    script = tmp / "digest.sh"
    script.write_text(f'#!/bin/sh\n[ "$1" = "{refuse}" ] && {{ echo "manifest unknown" >&2; exit 1; }}\n'
                      'printf \'"sha256:%s"\\n\' "$(printf %s "$1" | sha256sum | cut -d" " -f1)"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return script


def run(tmp: Path, resolver: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "ROOT": str(tmp), "DIGEST_CMD": str(resolver)}
    return subprocess.run(["sh", str(DEPLOY / "scripts/pin-images.sh"), *args], env=env, capture_output=True, text=True)


def digest_of(ref: str) -> str:
    import hashlib

    return "sha256:" + hashlib.sha256(ref.encode()).hexdigest()


def test_pin_images_writes_every_digest_once(tmp_path):
    tree, resolver = copy_tree(tmp_path / "tree"), fake_resolver(tmp_path)
    assert run(tree, resolver, "--check").returncode == 1, "the repository holds tags only"
    first = run(tree, resolver)
    assert first.returncode == 0, first.stderr
    texts = {name: (tree / name).read_text() for name in FILES}
    for name in FILES[:2]:
        (ref,) = re.findall(r"^FROM\s+(\S+):(\S+)@(\S+)\s+AS runtime", texts[name], re.M)
        assert ref[2] == digest_of(f"{ref[0]}:{ref[1]}"), name
    images = re.findall(r"^\s+image:\s+(\S+)", texts["deploy/docker-compose.yml"], re.M)
    literal = [i for i in images if not i.startswith("${")]
    assert {i.split("@")[0].split(":")[0] for i in literal} == {"nginx", "postgres", "prom/prometheus", "grafana/grafana"}
    assert all(i.split("@")[1] == digest_of(i.split("@")[0]) for i in literal)
    import yaml

    for name in FILES[3:]:  # every entry of images: once (the base's: the detector and the router's nginx)
        entries = yaml.safe_load(texts[name])["images"]
        assert texts[name].count("digest: sha256:") == len(entries) and len(entries) == (2 if "base" in name else 1), name
        for entry in entries:
            ref = f"{entry.get('newName', entry['name'])}:{entry['newTag']}"
            assert entry["digest"] == digest_of(ref), name
    assert run(tree, resolver, "--check").returncode == 0
    assert run(tree, resolver).returncode == 0
    assert {name: (tree / name).read_text() for name in FILES} == texts, "a second run changes nothing"
    assert "images pinned" in first.stdout


def test_an_unresolvable_image_stops_it_and_changes_nothing(tmp_path):
    tree = copy_tree(tmp_path / "tree")
    before = {name: (tree / name).read_text() for name in FILES}
    r = run(tree, fake_resolver(tmp_path, refuse="postgres:17.6-alpine"))
    assert r.returncode != 0 and "postgres:17.6-alpine" in r.stderr and "nothing written" in r.stderr
    assert {name: (tree / name).read_text() for name in FILES} == before


def test_the_repository_holds_reviewed_tags_and_renovate_keeps_them_current():
    for name in FILES[:3]:
        assert "@sha256:" not in (REPO / name).read_text(), f"{name}: digests are written at the site"
    config = json.loads((REPO / "renovate.json").read_text())
    assert {"dockerfile", "docker-compose", "kustomize", "pip_requirements"} <= set(config["enabledManagers"])
    assert "docker:pinDigests" in config["extends"] and config["lockFileMaintenance"]["enabled"] is True
