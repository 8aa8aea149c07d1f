"""One composition root (docs/architecture.md): app/wiring builds every part, finished.

Two rules, read from the source (the AST), because neither import-linter nor mypy can say them:

* Outside app/wiring no code assigns an attribute of another object when that attribute is a
  *collaborator slot* of an app class: a callback (``on_*``, a ``Callable``) or a part (an
  instance of an app class that is not a record, or a Protocol). Those come in through the
  constructor (or a ``Slot``, for parts that arrive later), never patched on afterwards. Nor
  does an object write into a part it holds (``self.part.x = ...``): it asks the part.
  Records (dataclasses, pydantic models, named tuples, exceptions) hold data and are
  updated by the code that owns them; a name that is a data field of some record is not
  flagged when reached through a plain name (the check has no types, only names).
* No ``isinstance`` names a rules port class (every class in app/rules/port.py, read from
  the file, and the façade that implements them): a port is not downcast to reach a part.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
APP = REPO / "app"
WIRING = "app/wiring/"
RECORD_BASES = {"BaseModel", "NamedTuple", "TypedDict", "Enum", "IntEnum", "StrEnum", "Exception"}
FACADES = {"RulesService"}  # implements the ports in app/rules/port.py

# (module, attribute): an object updating a part it built itself, where the part has no other owner.
ALLOWED = {
    ("app/rules/logic/view/monitor.py", "streak_since"),  # the monitor resets its own frozen-frame tracker
    ("app/rules/service/health.py", "interval_s"),  # its own sweep follows reloaded thresholds (Periodic re-reads it)
}


@dataclass
class Classes:
    """What the app's classes hold: the collaborator slots and the records' data fields."""

    parts: set[str] = field(default_factory=set)  # classes that are not records
    slots: dict[str, str] = field(default_factory=dict)  # attribute -> "module:Class" holding a collaborator there
    data: set[str] = field(default_factory=set)  # attributes that are data fields of some record
    own: dict[str, set[str]] = field(default_factory=dict)  # class -> its collaborator attributes


def sources() -> dict[str, str]:
    return {str(p.relative_to(REPO)): p.read_text() for p in sorted(APP.rglob("*.py"))}


def _name(node: ast.expr) -> str:
    return ast.unparse(node).split("(")[0].split("[")[0].split(".")[-1]


def classes_of(trees: dict[str, ast.Module]) -> Classes:
    bases: dict[str, set[str]] = {}
    dataclasses: set[str] = set()
    found: list[tuple[str, ast.ClassDef]] = []
    aliases = {"Callable"}  # module-level aliases of Callable types (``Elsewhere = Callable[...]``)
    for path, tree in trees.items():
        aliases |= {n.targets[0].id for n in tree.body if isinstance(n, ast.Assign) and len(n.targets) == 1
                    and isinstance(n.targets[0], ast.Name) and "Callable" in ast.unparse(n.value)}
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = {_name(b) for b in node.bases}
                if "dataclass" in {_name(d) for d in node.decorator_list}:
                    dataclasses.add(node.name)
                found.append((path, node))
    records = dataclasses | {n for n, b in bases.items() if b & RECORD_BASES or any(x.endswith("Error") for x in b)}
    while grown := {n for n, b in bases.items() if n not in records and b & (records - dataclasses)}:
        records |= grown  # subclasses of pydantic models, exceptions, ...
    out = Classes(parts=set(bases) - records)

    def collaborator(annotation: str) -> bool:
        return bool(set(re.findall(r"[A-Za-z_]\w*", annotation)) & (aliases | out.parts))

    def note(path: str, cls: ast.ClassDef, attr: str, annotation: str) -> None:
        if attr.startswith("on_") or (annotation and collaborator(annotation)):
            out.slots.setdefault(attr, f"{path}:{cls.name}")
            out.own.setdefault(cls.name, set()).add(attr)
        elif annotation and cls.name in records:
            out.data.add(attr)

    for path, cls in found:
        for item in cls.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                note(path, cls, item.target.id, ast.unparse(item.annotation))
        for fn in (n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            params = {a.arg: ast.unparse(a.annotation) for a in fn.args.args + fn.args.kwonlyargs if a.annotation}
            for node in ast.walk(fn):
                for target, value, annotation in _assignments(node):
                    if isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                            and target.value.id == "self":
                        first = value.values[0] if isinstance(value, ast.BoolOp) else value
                        if not annotation and isinstance(first, ast.Name):
                            annotation = params.get(first.id, "")  # self.x = x (or x or default)
                        if not annotation and isinstance(first, ast.Call) and _name(first.func) in out.parts:
                            annotation = _name(first.func)  # self.x = Part(...)
                        note(path, cls, target.attr, annotation)
    return out


def _assignments(node: ast.AST) -> list[tuple[ast.expr, ast.expr | None, str]]:
    """(target, value, annotation) of each name an assignment statement binds."""
    if isinstance(node, ast.AnnAssign):
        return [(node.target, node.value, ast.unparse(node.annotation))]
    if isinstance(node, ast.AugAssign):
        return [(node.target, node.value, "")]
    if not isinstance(node, ast.Assign):
        return []
    out: list[tuple[ast.expr, ast.expr | None, str]] = []
    for target in node.targets:
        if isinstance(target, ast.Tuple):
            values = node.value.elts if isinstance(node.value, ast.Tuple) and len(node.value.elts) == len(
                target.elts) else [None] * len(target.elts)
            out += [(t, v, "") for t, v in zip(target.elts, values, strict=True)]
        else:
            out.append((target, node.value, ""))
    return out


def patched_attributes(files: dict[str, str], allowed: set[tuple[str, str]] = ALLOWED) -> list[str]:
    """``module:line: target`` for each assignment to another object's collaborator slot."""
    trees = {path: ast.parse(text) for path, text in files.items()}
    known = classes_of(trees)
    found = []
    for path, tree in trees.items():
        if path.startswith(WIRING):
            continue
        owners = {id(fn): cls.name for cls in ast.walk(tree) if isinstance(cls, ast.ClassDef)
                  for fn in ast.walk(cls) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))}
        functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        module_level = [n for b in tree.body for n in ast.walk(b)
                        if not isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        for fn, nodes in [(f, list(ast.walk(f))) for f in functions] + [(tree, module_level)]:
            mine = known.own.get(owners.get(id(fn), ""), set())
            for node in nodes:
                for target, _, _ in _assignments(node):
                    if not isinstance(target, ast.Attribute):
                        continue
                    base = target.value
                    if isinstance(base, ast.Name) and base.id in ("self", "cls"):
                        continue
                    into_own_part = isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name) \
                        and base.value.id == "self" and base.attr in mine
                    slot = target.attr in known.slots and target.attr not in known.data
                    if (into_own_part or slot) and (path, target.attr) not in allowed:
                        found.append(f"{path}:{target.lineno}: {ast.unparse(target)} "
                                     f"({known.slots.get(target.attr, 'a part of self')})")
    return sorted(set(found))


def port_classes() -> set[str]:
    tree = ast.parse((APP / "rules/port.py").read_text())
    return {node.name for node in tree.body if isinstance(node, ast.ClassDef)} | FACADES


def port_downcasts(files: dict[str, str], ports: set[str]) -> list[str]:
    found = []
    for path, text in files.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "isinstance" \
                    and len(node.args) == 2:
                kinds = node.args[1].elts if isinstance(node.args[1], ast.Tuple) else [node.args[1]]
                named = {_name(k) for k in kinds} & ports
                if named:
                    found.append(f"{path}:{node.lineno}: isinstance(..., {', '.join(sorted(named))})")
    return found


def test_no_part_is_patched_after_construction_outside_the_wiring():
    assert patched_attributes(sources()) == [], "hand collaborators over in the constructor (or a Slot), in app/wiring"


def test_every_allowed_exception_is_still_needed():
    found = patched_attributes(sources(), allowed=set())
    unused = {(path, attr) for path, attr in ALLOWED if not any(f.startswith(f"{path}:") and f".{attr} (" in f
                                                                for f in found)}
    assert unused == set(), "drop these from ALLOWED"


def test_no_port_is_downcast():
    ports = port_classes()
    assert "Rules" in ports and "RulesService" in ports
    assert port_downcasts(sources(), ports) == [], "depend on the port's methods, not on its implementation"


def test_the_checks_find_what_they_forbid():
    """Each kind of violation in a module beside the real ones is found (and the wiring may do it)."""
    files = sources()
    files["app/api/patch.py"] = (
        "def wire(gate, writer, service, audit, rules):\n"
        "    gate.audit = audit\n"  # a part (Slot[AuditTrail]) of the Gate
        "    writer.on_stored = service.notify\n"  # a callback
        "    gate.keys.on_change = print\n"
        "    assert isinstance(rules, RulesService)\n"
        "    if isinstance(rules, (int, Rules)):\n"
        "        pass\n"
        "class Holder:\n"
        "    def __init__(self, health: CameraHealth) -> None:\n"
        "        self.health = health\n"
        "    def later(self, fleet):\n"
        "        self.health.elsewhere = fleet.elsewhere\n")  # into a part it holds
    files["app/wiring/extra.py"] = "def wire(gate, audit):\n    gate.audit = audit\n"
    patched = patched_attributes(files)
    assert [line.split(" (")[0] for line in patched if line.startswith("app/api/patch.py")] == [
        "app/api/patch.py:12: self.health.elsewhere", "app/api/patch.py:2: gate.audit",
        "app/api/patch.py:3: writer.on_stored", "app/api/patch.py:4: gate.keys.on_change"]
    assert not any(line.startswith("app/wiring/") for line in patched)
    downcasts = port_downcasts({"app/api/patch.py": files["app/api/patch.py"]}, port_classes())
    assert downcasts == ["app/api/patch.py:5: isinstance(..., RulesService)",
                         "app/api/patch.py:6: isinstance(..., Rules)"]
