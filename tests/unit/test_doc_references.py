"""What the docs point at exists: relative links and their anchors, quoted section names
(`docs/security.md, "TLS"`: plain text no link checker follows), and the Kubernetes
Secrets and ConfigMaps they name (issue 42: docs named Secrets the manifests do not use,
and deploy/seccomp/README.md a section of docs/security.md that does not exist)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

MARKDOWN = sorted({*REPO.glob("docs/*.md"), *REPO.glob("deploy/**/*.md"), REPO / "README.md"})
# every text file that may name a doc's section in prose or a comment
TEXT_SUFFIXES = {".md", ".py", ".yaml", ".yml", ".sh", ".js", ".css", ".html", ".toml", ".txt", ".conf", ".json"}
TEXT = sorted(p for folder in ("docs", "deploy", "app", "scripts") for p in (REPO / folder).rglob("*")
              if p.is_file() and (p.suffix in TEXT_SUFFIXES or p.name.startswith("Dockerfile")))
TEXT += [REPO / "README.md", REPO / "Makefile", *REPO.glob("Dockerfile.*")]

LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# `docs/rules.md, "Filters"`, `[security.md](security.md), "Kubernetes"`, `docs/rules.md "X"`
QUOTED = re.compile(r"((?:[\w.-]+/)*[\w.-]+\.md)(?:\]\([^)\s]*\))?,? (?:section )?\"([^\"\n]{2,80})\"")


def headings(path: Path) -> list[str]:
    """The section names of a Markdown file: its headings without trailing `[...]` tags, and
    its bold paragraph labels (`**Relaxing for a GPU driver.**`)."""
    text = path.read_text()
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # no '#' comment of a code block
    names = [re.sub(r"\s*\[[^\]]*\]\s*$", "", h).strip() for h in re.findall(r"^#{1,6} +(.+?)\s*$", text, re.M)]
    names += [re.sub(r"^\d+\. +", "", h) for h in names if re.match(r"\d+\. ", h)]  # "## 3. GPU pinning"
    names += [label.strip().rstrip(".:") for label in re.findall(r"\*\*([^*\n]{2,80})\*\*", text)]
    return names


def names_a_section(quoted: str, sections: list[str]) -> bool:
    """The quoted name is a section's name, or its lead before a colon, comma or a
    parenthesis (`"Camera ingest"` names `## Camera ingest (`python -m app.ingest.bench`)`)."""
    wanted = quoted.lower().rstrip(".")
    return any(h.lower() == wanted or re.match(re.escape(wanted) + r"(?::|,| \(| \[| -)", h.lower())
               for h in sections)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
    return {slug(h) for h in re.findall(r"^#{1,6} +(.+?)\s*$", text, re.M)}


def resolve_doc(name: str, where: Path) -> Path | None:
    """A referenced Markdown file: relative to the referring file, else to the repository,
    else one of docs/ (comments in app/ say `docs/rules.md`, docs say `rules.md`)."""
    for base in (where.parent, REPO, REPO / "docs"):
        candidate = (base / name).resolve()
        if candidate.is_file():
            return candidate
    return None


def test_every_relative_link_and_anchor_resolves():
    broken = []
    for doc in MARKDOWN:
        text = re.sub(r"^```.*?^```", "", doc.read_text(), flags=re.M | re.S)
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto: not checked offline
            path, _, anchor = target.partition("#")
            file = (doc.parent / path).resolve() if path else doc
            if not file.exists():
                broken.append(f"{doc.relative_to(REPO)}: {target} (no such file)")
            elif anchor and file.suffix == ".md" and anchor not in anchors(file):
                broken.append(f"{doc.relative_to(REPO)}: {target} (no such section)")
    assert not broken, broken


def test_every_quoted_section_name_exists():
    seen, broken = 0, []
    for path in TEXT:
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for name, section in QUOTED.findall(text):
            doc = resolve_doc(name, path)
            if doc is None:
                broken.append(f"{path.relative_to(REPO)}: {name} (no such file)")
                continue
            seen += 1
            if not names_a_section(section, headings(doc)):
                broken.append(f'{path.relative_to(REPO)}: {name}, "{section}"')
    assert seen > 20, "the pattern no longer finds the references"
    assert not broken, broken


@pytest.mark.parametrize("text, ok", [
    ('see docs/security.md, "Threat model"', True),
    ('(docs/security.md, "GPU checks")', False),
    ('([security.md](security.md), "From an empty node")', True),
])
def test_the_check_tells_a_real_section_from_a_missing_one(text, ok):
    name, section = QUOTED.search(text).groups()
    doc = resolve_doc(name, REPO / "docs" / "x.md")
    assert doc is not None
    assert names_a_section(section, headings(doc)) is ok


def test_kubernetes_names_in_the_docs_are_the_manifests():
    manifests = "\n".join(p.read_text() for p in (REPO / "deploy/k8s").rglob("*.yaml"))
    defined = set(re.findall(r"^\s*(?:name|secretName|claimName): *(campusguard-[\w-]+)", manifests, re.M))
    # Secrets the base ships none of: created by the commands in kustomization.yaml
    defined |= set(re.findall(r"create secret generic (campusguard-[\w-]+)", manifests))
    docs = "\n".join(p.read_text() for p in MARKDOWN)
    named = set(re.findall(r"`(campusguard-[\w-]+)`\s+(?:Secret|ConfigMap)", docs))
    named |= set(re.findall(r"(?:Secrets?|ConfigMaps?)\s+`(campusguard-[\w-]+)`", docs))
    assert named, "the pattern no longer finds the names"
    assert named <= defined, sorted(named - defined)
