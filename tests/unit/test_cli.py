"""The command table (app/cli.py): every listed command loads, and a missing one says so."""

from __future__ import annotations

import pytest

from app import cli


def test_every_listed_command_is_built():
    sub = next(a for a in cli.build_parser()._actions if a.dest == "command")
    assert set(sub.choices) == set(cli.COMMANDS)


def test_a_command_whose_module_is_missing_fails_loudly(monkeypatch):
    monkeypatch.setitem(cli.COMMANDS, "ghost", ("app.commands.ghost", "a command without its module"))
    with pytest.raises(ModuleNotFoundError, match=r"'ghost'.*app\.commands\.ghost is missing") as caught:
        cli.build_parser()
    assert caught.value.name == "app.commands.ghost"


def test_a_missing_dependency_of_a_command_is_not_mistaken_for_a_missing_command(monkeypatch):
    real = cli.importlib.import_module

    def importer(name: str):
        if name == "app.commands.keys":
            raise ModuleNotFoundError("No module named 'somelib'", name="somelib")
        return real(name)

    monkeypatch.setattr(cli.importlib, "import_module", importer)
    with pytest.raises(ModuleNotFoundError, match="somelib") as caught:
        cli.build_parser()
    assert caught.value.name == "somelib"
