"""Unknown CAMPUSGUARD_* names are startup errors with a suggestion; deployment files set
only real settings (or the few variables listed as meant for other tools)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from app.config import FOREIGN_VARIABLES, load_settings, setting_names, unknown_variables
from app.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
NAME = re.compile(r"\bCAMPUSGUARD_[A-Z0-9_]+\b")


def test_misspelt_queue_setting_names_the_real_one():
    assert unknown_variables(["CAMPUSGUARD_MAX_QUEUE"]) == [
        "CAMPUSGUARD_MAX_QUEUE is not a setting; did you mean CAMPUSGUARD_QUEUE_SIZE?"]


def test_spelling_distance_suggests_the_closest_setting():
    (msg,) = unknown_variables(["CAMPUSGUARD_REQUEST_TIMEOUT"])
    assert msg.endswith("did you mean CAMPUSGUARD_REQUEST_TIMEOUT_S?")
    (msg,) = unknown_variables(["campusguard_devise"])  # environment names are case-insensitive
    assert "CAMPUSGUARD_DEVICE" in msg
    (msg,) = unknown_variables(["CAMPUSGUARD_ZZZZZZZZ"])
    assert "is not a setting" in msg and "did you mean" not in msg


def test_settings_other_prefixes_and_allowed_names_pass():
    names = sorted(setting_names()) + ["PATH", "HOME", "CAMPUSGUARD_TEST_WEIGHTS", *FOREIGN_VARIABLES]
    assert unknown_variables(names) == []


def test_load_settings_refuses_unknown_environment_and_dotenv(tmp_path):
    with pytest.raises(ConfigError, match="CAMPUSGUARD_MAX_QUEUE is not a setting"):
        load_settings({"CAMPUSGUARD_MAX_QUEUE": "4"}, env_file=None)
    env_file = tmp_path / ".env"
    env_file.write_text("CAMPUSGUARD_QUEUE_SIZE=4\nCAMPUSGUARD_BATCH_SIZE=4\n")
    with pytest.raises(ConfigError, match="CAMPUSGUARD_BATCH_SIZE is not a setting; did you mean CAMPUSGUARD_MAX_BATCH_SIZE"):
        load_settings({}, env_file=env_file)


def test_load_settings_turns_bad_values_into_one_config_error():
    with pytest.raises(ConfigError, match="CAMPUSGUARD_QUEUE_SIZE: Input should be greater than or equal to 1"):
        load_settings({}, env_file=None, queue_size=0)
    assert load_settings({}, env_file=None, queue_size=3).queue_size == 3


def _deployment_names() -> set[str]:
    files = [*REPO.glob("deploy/docker-compose*.yml"), REPO / "deploy/.env.example", *REPO.glob("deploy/k8s/**/*.yaml"),
             *REPO.glob("Dockerfile*"), *REPO.glob("deploy/scripts/*")]
    names: set[str] = set()
    for path in files:
        names |= set(NAME.findall(path.read_text()))
    return names


def test_deployment_files_set_only_settings():
    names = _deployment_names()
    assert "CAMPUSGUARD_WEIGHTS" in names and "CAMPUSGUARD_IMAGE" in names  # the scan sees the files
    assert unknown_variables(names) == []


def test_serve_exits_2_on_a_misspelt_setting(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPUSGUARD_")}
    env["CAMPUSGUARD_MAX_QUEUE"] = "4"
    proc = subprocess.run([sys.executable, "-m", "app.cli", "serve"], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert "CAMPUSGUARD_MAX_QUEUE is not a setting; did you mean CAMPUSGUARD_QUEUE_SIZE?" in proc.stderr
    assert "Traceback" not in proc.stderr
