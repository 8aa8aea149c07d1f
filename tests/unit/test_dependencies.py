"""pyproject.toml lists only what the code uses: every runtime dependency is imported
somewhere under app/ (or is on the short, justified list of packages used without an
import of their own)."""

from __future__ import annotations

import ast
import re
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NAME = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)")

# Dependencies that work without an `import` of their name in app/, and why.
USED_WITHOUT_IMPORT = {
    "onnxslim": "called by Ultralytics' ONNX export (simplify=True) in app/inference/export.py",
    "tzdata": "IANA time zones for zoneinfo on systems without /usr/share/zoneinfo",
    "lap": "linear assignment for Ultralytics' ByteTrack (app/rules/logic/tracking.py)",
    "python-multipart": "FastAPI's form parser for multipart uploads (imported as multipart)",
    "psycopg": "PostgreSQL driver SQLAlchemy loads from the URL (postgresql+psycopg://) of the event store",
    "torchvision": "imported by Ultralytics when a model loads; declared so torch and torchvision come as a pair",
}


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def imported_top_levels() -> set[str]:
    names: set[str] = set()
    for path in (REPO / "app").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names.add(node.module.split(".")[0])
    return names


def test_every_runtime_dependency_is_imported():
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    declared = {canonical(NAME.match(req).group(1)) for req in project["dependencies"]}
    for extra in ("nvidia", "amd"):  # optional GPU telemetry, imported lazily in app/inference/devices.py
        declared |= {canonical(NAME.match(req).group(1)) for req in project["optional-dependencies"].get(extra, [])}
    provided: dict[str, set[str]] = {}
    for module, dists in packages_distributions().items():
        for dist in dists:
            provided.setdefault(canonical(dist), set()).add(module)
    imported = imported_top_levels()
    unused = sorted(dep for dep in declared - set(USED_WITHOUT_IMPORT)
                    if not provided.get(dep, {dep.replace("-", "_")}) & imported)
    assert unused == [], f"declared in pyproject.toml but never imported under app/: {unused}"


def test_exceptions_are_still_declared():
    """The allowance list may not outlive the dependency it excuses."""
    text = (REPO / "pyproject.toml").read_text()
    for name in USED_WITHOUT_IMPORT:
        assert f'"{name}' in text, name
