"""The test suite's own shape (issue 39, item 7): no test module imports from another test module.

A helper that lives in a test module drags that module's tests, fixtures and skip marks into every
module that borrows it, and moving or renaming the file breaks strangers; shared helpers belong in
tests/support/ (or a folder's conftest.py when they are fixtures)."""

from __future__ import annotations

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def _is_test_module(dotted: str) -> bool:
    return any(part.startswith("test_") for part in dotted.split("."))


def imported_test_modules(source: str) -> list[str]:
    """The test_* modules that ``source`` imports, by ``import x`` or ``from x import y``
    (relative imports included: ``from .test_x import y`` and ``from . import test_x``)."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if _is_test_module(alias.name)]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if _is_test_module(module):
                found.append(module)
            elif node.level or module.startswith("tests"):
                found += [f"{module}.{alias.name}" for alias in node.names if alias.name.startswith("test_")]
    return found


def test_the_detector_sees_every_form_of_a_test_module_import() -> None:
    source = ("import tests.unit.test_a\n"
              "from tests.integration.test_b import helper\n"
              "from .test_c import thing\n"
              "from tests.unit import test_d\n"
              "def f():\n    from tests.deploy.test_e import g\n"
              "from tests.support.wait import wait_for\n"
              "import json\n")
    assert imported_test_modules(source) == ["tests.unit.test_a", "tests.integration.test_b", "test_c",
                                           "tests.unit.test_d", "tests.deploy.test_e"]


def test_no_test_module_imports_another_test_module() -> None:
    files = sorted(TESTS.rglob("test_*.py"))
    assert len(files) > 50, "the walk found the test files"
    offenders = {str(path.relative_to(TESTS.parent)): bad for path in files
                 if (bad := imported_test_modules(path.read_text(encoding="utf-8")))}
    assert not offenders, f"move the shared helpers into tests/support/ (or a conftest.py): {offenders}"
