"""docs/deploy.md names only things that exist: files, settings, compose services, targets."""

from __future__ import annotations

import re

from tests.deploy.conftest import COMPOSE, REPO, detector_services, load_compose

DOC = REPO / "docs" / "deploy.md"


def text() -> str:
    return DOC.read_text()


def test_sections():
    headings = [h.lower() for h in re.findall(r"^#+ (.+)$", text(), re.M)]
    for needed in ("bare mi300x node to a dashboard", "gpu pinning", "scaling out", "without downtime"):
        assert any(needed in h for h in headings), needed


def test_referenced_files_exist():
    paths = set(re.findall(r"(?<![\w/.-])((?:deploy|docs|requirements|tests)/[\w./-]*[\w/]|Dockerfile\.\w+|\.dockerignore)",
                           text()))
    assert len(paths) > 15
    missing = [p for p in paths if not (REPO / p).exists() and not p.startswith(("deploy/.env", "deploy/secrets"))
               and "/N" not in p and not p.endswith("alerts_test.yml") and "yolov8n" not in p]
    assert not missing, missing
    assert (REPO / "deploy/prometheus/tests/alerts_test.yml").is_file()
    assert (REPO / "deploy/.env.example").is_file()
    # the test files the guide lists all exist (and every deploy test file is listed)
    listed = set(re.findall(r"`(test_\w+\.py)`", text()))
    present = {p.name for p in (REPO / "tests/deploy").glob("test_*.py")}
    assert listed == present


def test_settings_and_services_named_exist():
    from app.config import Settings

    compose_vars = {"CAMPUSGUARD_IMAGE", "CAMPUSGUARD_CUDA_IMAGE"}
    for var in set(re.findall(r"CAMPUSGUARD_[A-Z_]+", text())) - compose_vars:
        assert var[len("CAMPUSGUARD_"):].lower() in Settings.model_fields, var
    services = set(load_compose(COMPOSE)["services"])
    assert {"detector-0", "detector-7"} <= services
    for svc in re.findall(r"\b(detector-\d)\b", text()):
        assert svc in services
    assert len(detector_services(load_compose(COMPOSE))) == 8


def test_commands_reference_real_files():
    for f in re.findall(r"docker build -f (\S+)", text()):
        assert (REPO / f).is_file(), f
    for f in re.findall(r"docker compose((?: -f \S+)+)", text()):
        for path in f.split(" -f ")[1:]:
            assert (REPO / path.strip()).is_file(), path
    for k in re.findall(r"kubectl apply -k (\S+)", text()):
        assert (REPO / k / "kustomization.yaml").is_file(), k
