"""The architecture as a contract (docs/architecture.md): layers, no import cycles, small modules.

Standing rules for every change: imports point one way (the import-linter contracts in
pyproject.toml), the import graph has no cycle at all (not even one held open by a lazy or
``TYPE_CHECKING`` import), no Python module in app/ is over 400 lines, the rules façade
stays thin, and a server without a site file never loads the rules stack.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import grimp
import networkx as nx
import pytest
import tomllib

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "app"
MAX_MODULE_LINES = 400
MAX_FACADE_LINES = 300
RULES_STACK = ("sqlalchemy", "alembic", "paho", "ruamel", "av")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("app", include_external_packages=True, cache_dir=None)


def test_every_layer_contract_is_kept():
    """import-linter's own check (``lint-imports``) over the contracts in pyproject.toml."""
    out = subprocess.run([str(Path(sys.executable).with_name("lint-imports")), "--config", "pyproject.toml",
                          "--no-cache", "--no-logo"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    # layers, rules layers, HTTP and flow without the rules stack, the flow by the port, ingest by the flow, no Settings
    assert out.stdout.count(" KEPT") >= 6


def contract_modules(config: dict) -> list[str]:
    """Every module an import-linter contract names (layers, sources, forbidden), as written."""
    named: list[str] = []
    for contract in config["tool"]["importlinter"]["contracts"]:
        for layer in contract.get("layers", []):
            named += [part.strip() for part in layer.split("|")]
        named += contract.get("source_modules", []) + contract.get("forbidden_modules", [])
    return named


def test_every_module_the_contracts_name_exists_and_none_is_optional():
    """A layer in parentheses is optional to import-linter: renamed, its contract would pass on
    with the layer silently gone. Every app module named must exist; none may be optional."""
    named = contract_modules(tomllib.loads((REPO / "pyproject.toml").read_text()))
    optional = [name for name in named if name.startswith("(")]
    missing = [name for name in named if name.startswith("app") and not (
        (REPO / name.replace(".", "/")).with_suffix(".py").is_file() or (REPO / name.replace(".", "/")).is_dir())]
    assert {"app.ingest", "app.flow", "app.rules.logic"} <= set(named)
    assert optional == [] and missing == [], f"optional: {optional}; missing: {missing}"


def test_the_docs_state_the_module_cap_the_test_enforces():
    for doc in ("docs/architecture.md", "docs/testing.md"):
        text = " ".join((REPO / doc).read_text().split())
        assert re.findall(r"module (?:in `app/` )?over (\d+) lines", text) == [str(MAX_MODULE_LINES)], doc


def test_the_import_graph_has_no_cycle(graph):
    edges = nx.DiGraph()
    for module in graph.modules:
        if module.startswith("app"):
            edges.add_edges_from((module, imported) for imported in graph.find_modules_directly_imported_by(module)
                                 if imported.startswith("app"))
    cycles = list(nx.simple_cycles(edges))
    assert cycles == [], f"import cycles: {cycles[:5]}"


def test_no_module_is_over_the_size_limit():
    long = {str(p.relative_to(REPO)): n for p in APP.rglob("*.py")
            if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES}
    assert long == {}, f"modules over {MAX_MODULE_LINES} lines: split them along their seams"


def test_the_rules_facade_stays_thin():
    source = (APP / "rules/service/facade.py").read_text()
    cls = next(n for n in ast.parse(source).body if isinstance(n, ast.ClassDef) and n.name == "RulesService")
    assert cls.end_lineno - cls.lineno + 1 <= MAX_FACADE_LINES
    constructor = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
    assert len(constructor.args.args) <= 2  # self and one parts object: the composition root builds the parts
    checks = [n for n in ast.walk(cls) if isinstance(n, ast.Compare) and any(isinstance(o, (ast.Is, ast.IsNot))
              for o in n.ops) and isinstance(n.left, ast.Attribute)]
    assert len(checks) <= 3  # optional parts are null objects, not `self.x is not None` checks


def test_a_server_without_rules_never_loads_the_rules_stack():
    code = ("import sys; from app.config import Settings; from app.main import create_app; "
            "create_app(Settings(_env_file=None)); import app.api.deps; "
            f"print(','.join(m for m in {RULES_STACK!r} if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"loaded without a site file: {out.stdout.strip()}"


def test_rules_with_clips_off_never_load_pyav(tmp_path):
    """The GPU node's device run carries rules (SQLAlchemy, Alembic, ruamel, lap) but not PyAV's
    ~30 MB wheel: with CAMPUSGUARD_CLIPS=false the rules stack must not import ``av`` (the clip
    writer imports it when it writes a clip)."""
    from app.tooling.bench.campus import camera_ids, site_yaml

    site = tmp_path / "site.yaml"
    site.write_text(site_yaml(camera_ids(2)))
    code = ("import sys; from app.config import Settings; from app.core.metrics import Metrics; "
            "from app.wiring.rules import build_rules_stack; "
            f"s = Settings(_env_file=None, site_config={str(site)!r}, data_dir={str(tmp_path)!r}, clips=False); "
            "stack = build_rules_stack(s, Metrics(s.metrics_max_cameras)); "
            "print(type(stack.rules).__name__, 'av' in sys.modules, 'alembic' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    name, av, alembic = out.stdout.split()[-3:]
    assert name != "NoRules" and alembic == "True", out.stdout  # the rules stack really loaded
    assert av == "False", "PyAV imported with clips off"
