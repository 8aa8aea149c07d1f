"""Zone edits keep every other comment where it was (issue 23 finding 6): comment lines belong to
what follows them, so deleting or adding a zone moves or drops no other camera's or zone's
header, nor the blank line above it, wherever ruamel.yaml attached them (after a scalar, or
after a flow list such as ``classes: [person]`` or an ``exclude`` polygon)."""

from __future__ import annotations

import pytest
import yaml

from app.rules.site.writer import SiteFile
from tests.support.rules_util import EXAMPLE_SITE

CAMERAS = [c["id"] for c in yaml.safe_load(EXAMPLE_SITE.read_text())["cameras"]]


def zone(name: str, last: str) -> dict:
    """A zone whose last line is a flow list (``classes``), a scalar, or a flow list in a block list."""
    rule = {"type": "intrusion", "classes": ["person"]}
    if last == "scalar":
        rule = {"type": "intrusion", "classes": ["person"], "cooldown_s": 5}
    elif last == "exclude":
        rule = {"type": "intrusion", "exclude": [[[0.2, 0.2], [0.3, 0.2], [0.3, 0.3]]]}
    return {"name": name, "polygon": [[0.1, 0.1], [0.5, 0.1], [0.5, 0.5]], "rules": [rule]}


def check_headers(text: str) -> None:
    """Every camera header sits right above its camera, with a blank line above it (but the first)."""
    lines = text.splitlines()
    headers = [i for i, line in enumerate(lines) if line.startswith("  # ---")]
    assert len(headers) == len(CAMERAS), text
    for n, i in enumerate(headers):
        assert lines[i + 1].startswith("  - id: "), (lines[i], lines[i + 1])
        assert lines[i - 1] == ("cameras:" if n == 0 else ""), (n, lines[i - 1], lines[i])


def comment_lines(text: str) -> list[str]:
    return [line.strip() for line in text.splitlines() if "#" in line]


@pytest.fixture
def site(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_bytes(EXAMPLE_SITE.read_bytes())
    return path


@pytest.mark.parametrize("camera", CAMERAS)
@pytest.mark.parametrize("last", ["flow", "scalar", "exclude"])
def test_adding_zones_then_deleting_them_gives_back_the_file_byte_for_byte(site, camera, last):
    original = site.read_bytes()
    editor = SiteFile(site)
    editor.put_zone(camera, "extra-a", zone("extra-a", last))
    editor.put_zone(camera, "extra-b", zone("extra-b", last))
    added = site.read_text()
    check_headers(added)
    assert comment_lines(added) == comment_lines(original.decode())
    names = [z["name"] for c in yaml.safe_load(added)["cameras"] if c["id"] == camera for z in c["zones"]]
    assert names[-2:] == ["extra-a", "extra-b"]
    editor.put_zone(camera, "extra-b", None)
    editor.put_zone(camera, "extra-a", None)
    assert site.read_bytes() == original


@pytest.mark.parametrize("camera", CAMERAS)
def test_deleting_a_cameras_zone_keeps_every_other_comment_and_blank_line(site, camera):
    original = site.read_text()
    own = yaml.safe_load(original)["cameras"][CAMERAS.index(camera)]["zones"][0]["name"]
    SiteFile(site).put_zone(camera, own, None)
    after = site.read_text()
    check_headers(after)
    start = original.index(f"      - name: {own}\n")
    end = original.index("\n\n", start) if "\n\n" in original[start:] else len(original)
    zone_comments = comment_lines(original[start:end])
    assert comment_lines(after) == [c for c in comment_lines(original) if c not in zone_comments]


def test_a_middle_zones_header_goes_with_it_and_the_next_ones_stays(site):
    text = site.read_text().replace("            cooldown_s: 120\n", "            cooldown_s: 120\n"
                                    "\n      # B header: the bike rack\n      - name: b\n"
                                    "        polygon: [[0.3, 0.6], [0.7, 0.6], [0.7, 0.95]]\n"
                                    "        rules: [{type: intrusion, classes: [bicycle]}]\n"
                                    "\n      # C header: the car park\n      - name: c\n"
                                    "        polygon: [[0.3, 0.6], [0.7, 0.6], [0.7, 0.95]]\n", 1)
    site.write_text(text)
    SiteFile(site).put_zone("gate-cam", "b", None)
    after = site.read_text()
    check_headers(after)
    assert "B header" not in after
    lines = after.splitlines()
    i = lines.index("      # C header: the car park")
    assert lines[i + 1] == "      - name: c" and lines[i - 1] == ""
    assert comment_lines(after) == [c for c in comment_lines(text) if "B header" not in c]
