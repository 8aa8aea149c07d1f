"""Reading the site file: YAML in, a validated ``SiteConfig`` out, or every problem at once.

``load_site_config(path)`` reads the YAML, validates it with pydantic and runs the
cross-checks pydantic cannot express per field (unique camera ids, zone and rule names).
Every problem is collected first, so a bad file is refused with the complete list, never
one error at a time. The exception is ``SiteConfigError`` (a ``ConfigError``) whose
``errors`` attribute is that list and whose message lists them one per line.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from app.core.errors import ConfigError
from app.core.text import text_problem
from app.rules.site.schema import RULE_TYPES, SiteConfig

Loc = tuple[str | int, ...]


@dataclass(frozen=True, slots=True)
class Issue:
    """One problem: where (pydantic's loc into the raw data; None for the file as a whole) and what."""

    loc: Loc | None
    message: str

    def __str__(self) -> str:
        return self.message if self.loc is None else f"{_loc(self.loc)}: {self.message}"


class SiteConfigError(ConfigError):
    """The site file is invalid; ``errors`` lists every problem found (``issues``: the same, structured)."""

    status, code = 422, "invalid_site_config"  # as an HTTP reply (POST /admin/reload)

    def __init__(self, path: Path | str, errors: Sequence[str | Issue]) -> None:
        self.path = str(path)
        self.issues = [e if isinstance(e, Issue) else Issue(None, e) for e in errors]
        self.errors = [str(i) for i in self.issues]
        lines = "\n".join(f"  - {e}" for e in self.errors)
        super().__init__(f"site config {self.path} is invalid ({len(self.errors)} error(s)):\n{lines}")

    @property
    def detail(self) -> list:
        return self.errors


def _loc(loc: Loc) -> str:
    out = ""
    for part in path_of(loc):
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(top level)"


def path_of(loc: Loc) -> Loc:
    """pydantic's loc without the discriminator tags it inserts after a rule's index."""
    return tuple(p for i, p in enumerate(loc) if not (p in RULE_TYPES and i and isinstance(loc[i - 1], int)))


def _duplicates(raw: Any) -> list[Issue]:
    """Cross-checks on the raw data, so they run even where pydantic found other errors."""
    errors: list[Issue] = []
    cams = raw.get("cameras") if isinstance(raw, dict) else None
    if isinstance(cams, list) and not cams:
        errors.append(Issue(("cameras",), "at least one camera is needed"))
    if not isinstance(cams, list):
        return errors
    seen: dict[str, int] = {}
    for ci, cam in enumerate(cams):
        if not isinstance(cam, dict):
            continue
        cid = cam.get("id")
        if isinstance(cid, str):
            if cid in seen:
                errors.append(Issue(("cameras", ci, "id"), f"duplicate camera id {cid!r} (also cameras[{seen[cid]}])"))
            else:
                seen[cid] = ci
        zones = cam.get("zones")
        if not isinstance(zones, list):
            continue
        zseen: dict[str, int] = {}
        for zi, zone in enumerate(zones):
            if not isinstance(zone, dict):
                continue
            zname = zone.get("name")
            if isinstance(zname, str):
                if zname in zseen:
                    errors.append(Issue(("cameras", ci, "zones", zi, "name"), f"duplicate zone name {zname!r} "
                                        f"in camera {cid!r} (also zones[{zseen[zname]}])"))
                else:
                    zseen[zname] = zi
            rules = zone.get("rules")
            if not isinstance(rules, list):
                continue
            rseen: dict[str, int] = {}
            for ri, rule in enumerate(rules):
                if not isinstance(rule, dict):
                    continue
                rname = rule.get("name") or rule.get("type")
                if isinstance(rname, str):
                    if rname in rseen:
                        errors.append(Issue(("cameras", ci, "zones", zi, "rules", ri, "name"),
                                            f"duplicate rule name {rname!r} in zone {zname!r} "
                                            "(give each rule of the same type a 'name')"))
                    else:
                        rseen[rname] = ri
    return errors


def parse_site_config(raw: Any, source: str = "<site config>") -> SiteConfig:
    """Validate already-parsed YAML/JSON data; raise SiteConfigError listing every error."""
    errors: list[Issue] = []
    config: SiteConfig | None = None
    if not isinstance(raw, dict):
        raise SiteConfigError(source, [Issue((), f"expected a mapping with 'cameras', got {type(raw).__name__}")])
    try:
        config = SiteConfig.model_validate(raw)
    except ValidationError as exc:
        for err in exc.errors(include_url=False):
            errors.append(Issue(path_of(tuple(err["loc"])), err["msg"].removeprefix("Value error, ")))
    errors.extend(_duplicates(raw))
    if errors or config is None:
        raise SiteConfigError(source, errors or ["invalid site config"])
    return config


MAX_NODES = 1_000_000  # far beyond a real site; a YAML alias bomb expands past it at once
MAX_SITE_FILE_BYTES = 4 * 1024 * 1024  # a 1,000-camera site with sources and zones is about a third of it
MAX_ISSUES = 50  # a value check lists this many problems at most (the rest are alike)


def value_issues(raw: Any, at: Loc = ()) -> list[Issue]:
    """Values no reader of the site can hold, wherever they are (keys too): a string with a NUL
    or a lone surrogate (not Unicode: GET /site could not encode it), a number that is not
    finite (JSON has no Infinity; GET /site would show null). Walked without recursion, with
    each problem's location; refuses a document of more than MAX_NODES values (YAML aliases
    share one object, so a few hundred bytes can describe billions of nodes)."""
    issues: list[Issue] = []
    seen, stack = 0, [(raw, at)]
    while stack and len(issues) < MAX_ISSUES:
        node, loc = stack.pop()
        seen += 1
        if seen > MAX_NODES:
            return [Issue(None, f"the document expands to more than {MAX_NODES} values (YAML aliases repeated?); "
                                "a site file is far smaller")]
        if isinstance(node, str):
            problem = text_problem(node)
            if problem is not None:
                issues.append(Issue(loc, f"the text {problem}"))
        elif isinstance(node, float) and not math.isfinite(node):
            issues.append(Issue(loc, f"{node} is not a finite number"))
        elif isinstance(node, dict):
            for key, value in node.items():
                where = (*loc, key if isinstance(key, (str, int)) and not text_problem(str(key)) else "?")
                stack.append((key, where))
                stack.append((value, where))
        elif isinstance(node, list):
            stack.extend((item, (*loc, i)) for i, item in enumerate(node))
    return issues


def parse_site_text(text: str, source: str = "<site config>", *, as_json: bool = False) -> SiteConfig:
    """Parse (``yaml.safe_load``, or JSON) and validate a site file's text; SiteConfigError
    listing every error, for syntax, size and content alike."""
    return parse_site_document(text, source, as_json=as_json)[1]


def parse_site_document(text: str, source: str = "<site config>", *, as_json: bool = False) -> tuple[Any, SiteConfig]:
    """``parse_site_text``, also returning the parsed data (the zone editor compares it with the edit)."""
    if not text.strip():
        raise SiteConfigError(source, ["(top level): the site file is empty"])
    try:
        raw = json.loads(text) if as_json else yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise SiteConfigError(source, [f"YAML syntax error at {where}{problem}"]) from exc
    except json.JSONDecodeError as exc:
        where = f"line {exc.lineno}, column {exc.colno}"
        raise SiteConfigError(source, [f"JSON syntax error at {where}: {exc.msg}"]) from exc
    except RecursionError:
        raise SiteConfigError(source, ["(top level): the document is nested too deeply"]) from None
    except (ValueError, OverflowError) as exc:  # e.g. an integer of more than 4,300 digits, a date of month 13
        raise SiteConfigError(source, [f"(top level): a value cannot be read: {unreadable(exc)}"]) from None
    issues = value_issues(raw)
    if issues:
        raise SiteConfigError(source, issues)
    return raw, parse_site_config(raw, source)


def unreadable(exc: Exception) -> str:
    """Why the parser could not build a value (Python's own wording for the integer limit names
    an interpreter setting; the operator needs to know which value)."""
    text = str(exc)
    if "integer string conversion" in text:
        return f"a number has more than {sys.get_int_max_str_digits()} digits"
    return text


def read_site_bytes(path: Path | str) -> bytes:
    """The file's bytes; SiteConfigError when it cannot be read or is larger than a site file
    may be (checked before reading it)."""
    try:
        with Path(path).open("rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size > MAX_SITE_FILE_BYTES:
                raise SiteConfigError(path, [too_big(size)])
            return fh.read(MAX_SITE_FILE_BYTES + 1)
    except OSError as exc:
        raise SiteConfigError(path, [f"cannot read the file: {exc.strerror or exc}"]) from exc


def too_big(size: int) -> str:
    return (f"(top level): the site file is {size} bytes, more than the {MAX_SITE_FILE_BYTES} bytes "
            f"({MAX_SITE_FILE_BYTES // (1024 * 1024)} MB) a site file may have")


def load_site_config(path: Path | str) -> SiteConfig:
    """Read and validate the site YAML; raise SiteConfigError (a ConfigError) listing every error."""
    return parse_site_bytes(read_site_bytes(path), path)


def parse_site_bytes(data: bytes, path: Path | str) -> SiteConfig:
    """The site file's bytes as a validated SiteConfig (UTF-8 YAML): what loading and the zone
    editor both use, so an edit is checked exactly as the next load will read it."""
    return parse_site_file(data, path)[1]


def parse_site_file(data: bytes, path: Path | str) -> tuple[Any, SiteConfig]:
    """``parse_site_bytes``, also returning the parsed data."""
    if len(data) > MAX_SITE_FILE_BYTES:
        raise SiteConfigError(path, [too_big(len(data))])
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SiteConfigError(path, [f"the file is not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset "
                                     f"{exc.start}); save it as UTF-8"]) from exc
    return parse_site_document(text, str(path))

