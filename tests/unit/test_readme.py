"""The README is the front door: keep its settings table and commands true."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import SecretStr

from app.cli import COMMANDS
from app.config import Settings

README = (Path(__file__).resolve().parents[2] / "README.md").read_text()
CI = (Path(__file__).resolve().parents[2] / ".ci/run").read_text()


def _readme_defaults() -> dict[str, str]:
    rows = re.findall(r"^\| `CAMPUSGUARD_([A-Z0-9_]+)` \| ([^|]+) \|", README, re.M)
    return {name.lower(): value.strip() for name, value in rows}


def _shown(value: object) -> str:
    if isinstance(value, SecretStr):
        value = value.get_secret_value()
    if value is None:
        return "(unset)"
    if isinstance(value, list):
        return f"`{','.join(map(str, value))}`" if value else "(empty)"
    if value == "":
        return "(empty)"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    return f"`{value}`"


def test_every_setting_is_documented_with_its_default():
    documented = _readme_defaults()
    for name, field in Settings.model_fields.items():
        assert name in documented, f"CAMPUSGUARD_{name.upper()} is missing from the README's settings table"
        assert documented[name] == _shown(field.get_default(call_default_factory=True)), name
    assert set(documented) <= set(Settings.model_fields), "README documents settings that do not exist"


def test_readme_commands_and_ci_agree():
    assert "make run" in README and "make test" in README
    assert re.search(r"^make test$", CI, re.M), ".ci/run must call the README's test command"
    for command in COMMANDS:
        assert f"campusguard {command}" in README or f"`{command}`" in README, command
