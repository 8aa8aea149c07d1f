"""docs/architecture.md is true to the tree (issue 39, item 4): every path and every code name
it sends a contributor to exists, and the module cap it states is the one the tests enforce.

"Where things go" is where a new rule type, route or runtime is told to land; a renamed or
split module left there sends the next person to a file that is gone. Names are read from
the backticks and from the two folder trees (the layers, and the rules' sub-packages, whose
bare file names must exist in the sub-package they are listed under).
"""

from __future__ import annotations

import builtins
import re
import typing
from functools import cache
from pathlib import Path

from tests.conftest import REPO

DOC = REPO / "docs/architecture.md"
SETTINGS = REPO / "docs/settings.md"
APP = REPO / "app"
PATH = re.compile(r"^(?:[\w.<>-]+/)*[\w.<>-]+(?:\.py|/)$")  # app/flow/frame.py, mqtt/, routes/<resource>.py
NAME = re.compile(r"^[A-Za-z_]\w*(?:\.(?!py$)\w+)?$")  # CompiledRule.condition, wiring.build_flow, RULE_TYPES
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
RULES_TREE_SECTION = re.compile(r"^(site|logic|store|evidence|delivery|service)/\s", re.M)


def path_exists(token: str, under: Path = APP) -> bool:
    """``token`` names a file or folder: from the repository or app/ root, or (a name relative to
    a folder the text is about, such as ``routes/__init__.py``) as the tail of one under ``under``.
    A placeholder (``<resource>.py``) needs only its folder."""
    token = token.split("<")[0].rstrip("/") if "<" in token else token.rstrip("/")
    if not token:
        return False
    if (REPO / token).exists() or (APP / token).exists():
        return True
    return any(str(p.relative_to(under)).endswith(token) for p in under.rglob(Path(token).name)
               if "__pycache__" not in p.parts)


@cache
def definitions() -> dict[str, set[str]]:
    """Module path (dotted, packages too) -> the names defined there (classes, functions, assignments)."""
    found: dict[str, set[str]] = {}
    for path in APP.rglob("*.py"):
        text = path.read_text()
        names = {a or b or c for a, b, c in re.findall(
            r"^\s*(?:async\s+)?(?:def|class)\s+(\w+)|^\s*(\w+)\s*(?::|=)|^\s*self\.(\w+)\s*(?::|=)", text, re.M)}
        module = ".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__")
        for level in range(1, module.count(".") + 2):  # app.wiring.ingest counts for app.wiring and app too
            found.setdefault(".".join(module.split(".")[:level]), set()).update(names)
    return found


def name_exists(token: str) -> bool | None:
    """Whether a code name the doc uses is defined in app/ (or is Python's own); None for an
    attribute of something that is neither a class nor a module of app/ (``sys.modules``), which
    is not checked."""
    defs = definitions()
    everywhere = defs["app"]
    head, _, attr = token.partition(".")
    if attr:
        if head[0].isupper():  # Class.member: the member is defined in a module that defines the class
            return any(head in names and attr in names for module, names in defs.items() if module.count(".") >= 1)
        modules = [m for m in defs if m.split(".")[-1] == head]
        return any(attr in defs[m] for m in modules) if modules else None
    if re.match(r"^[A-Z][A-Z0-9_]{2,}$", token) and f"`CAMPUSGUARD_{token}`" in SETTINGS.read_text():
        return True  # a setting by its short name (`BACKEND`), as the docs write it
    if re.match(r"^[A-Z][a-z]", token) or re.match(r"^[A-Z][A-Z0-9_]{2,}$", token) or token.startswith("_"):
        return token in everywhere or hasattr(typing, token)
    # a function, field or module (``admit``, ``precision``, ``auto``) or a builtin (``isinstance``)
    return token in everywhere or any(m.split(".")[-1] == token for m in defs) or hasattr(builtins, token)


def doc_tokens(text: str) -> list[str]:
    """Backticked text of the prose, and the path-like words of the folder trees."""
    prose = FENCE.sub("", text)
    tokens = re.findall(r"`([^`\n]+)`", prose)
    for block in re.findall(r"^```\n(.*?)^```", text, re.M | re.S):
        tokens += [word for word in re.findall(r"[\w.<>/-]+", block) if PATH.match(word)]
    return tokens


def rules_tree_misses(text: str) -> list[str]:
    """The rules' tree: each file listed under ``site/``, ``logic/``, ... is in that sub-package."""
    block = next(b for b in re.findall(r"^```\n(.*?)^```", text, re.M | re.S) if RULES_TREE_SECTION.search(b))
    missing, section = [], ""
    for line in block.splitlines():
        if head := RULES_TREE_SECTION.match(line):
            section = head.group(1)
        elif re.match(r"^port\.py", line):
            section = ""
        words = [w for w in re.findall(r"\w[\w./]*", line) if w.endswith((".py", "/")) and w != f"{section}/"]
        for word in words:
            base = APP / "rules" / section if section and "/" not in word.rstrip("/") else APP / "rules"
            if not path_exists(word, under=base) or not any(base.rglob(Path(word.rstrip("/")).name)):
                missing.append(f"{section}/: {word}")
    return missing


def test_every_path_the_architecture_doc_names_exists():
    text = DOC.read_text()
    paths = [t for t in doc_tokens(text) if PATH.match(t)]
    assert len(paths) > 40, "the pattern no longer finds the paths"
    assert [p for p in paths if not path_exists(p)] == []
    assert rules_tree_misses(text) == []


def test_every_code_name_the_architecture_doc_names_exists():
    names = [t for t in doc_tokens(DOC.read_text()) if NAME.match(t)]
    checked = [n for n in names if name_exists(n) is not None]
    assert len(checked) > 40, "the pattern no longer finds the names"
    assert [n for n in checked if not name_exists(n)] == []


def test_the_checks_catch_a_stale_path_or_name():
    assert path_exists("app/flow/frame.py") and path_exists("routes/__init__.py", APP / "api")
    assert path_exists("app/api/routes/<resource>.py") and path_exists("mqtt/")
    assert not path_exists("app/rules/logic/evaluator_v2.py") and not path_exists("app/wiring.py")
    assert not path_exists("routes/<resource>.py", APP / "rules")
    assert name_exists("CompiledRule.condition") and name_exists("wiring.build_flow") and name_exists("RULE_TYPES")
    assert name_exists("Literal") and name_exists("_deliver") and name_exists("BACKEND")
    assert name_exists("CompiledRule.explode") is False and name_exists("wiring.build_everything") is False
    assert name_exists("NoSuchPart") is False and name_exists("NO_SUCH_TABLE") is False
    assert name_exists("auto") and name_exists("isinstance") and name_exists("run_batch")
    assert name_exists("run_everything") is False and name_exists("someone.thing") is None
    stale = "```\nsite/      schema.py (models), gone.py (a module that was split)\nport.py    the port\n```\n"
    assert rules_tree_misses(stale) == ["site/: gone.py"]


def test_the_ingest_modules_table_lists_every_module_of_app_ingest():
    """docs/cameras.md, "The code": one row per module of app/ingest/, and no row for a module that is gone."""
    text = (REPO / "docs/cameras.md").read_text().split("## The code")[1]
    rows = set(re.findall(r"^\| `(\w+\.py)` \|", text, re.M))
    modules = {p.name for p in (APP / "ingest").glob("*.py") if p.name != "__init__.py"}
    assert rows == modules, f"no row: {sorted(modules - rows)}; no module: {sorted(rows - modules)}"
