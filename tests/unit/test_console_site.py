"""GET /site, GET /site/schema and the zone editor routes in-process: writes, backups, comments,
If-Match, read-only files, per-field 422s, hostile input, and the next frame using the new zone."""

from __future__ import annotations

import errno
import hashlib
import pytest
import yaml

from app.rules.site.schema import RULE_TYPES
from app.rules.site.writer import SiteFile
from tests.support.console_util import site_app
from tests.support.rules_util import EXAMPLE_SITE, H, W, at, people
from tests.support.console_site import BIKES, ZONE

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def env(tmp_path):
    with site_app(tmp_path) as ip:
        yield ip


def comments(text: str) -> list[str]:
    """Every comment, in order; and each camera's header comment stays right above its camera."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("  # ---"):
            assert lines[i + 1].startswith("  - id: "), (line, lines[i + 1])
    return [line.split("#", 1)[1] for line in lines if "#" in line]


def version(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()[:16]


def test_site_document_and_schema(env):
    r = env.client.get("/site")
    body = r.json()
    assert r.status_code == 200 and body["version"] == version(env.site) and r.headers["etag"] == f'"{body["version"]}"'
    assert body["writable"] is True and body["path"] == str(env.site) and body["loaded_at"]
    cams = {c["id"]: c for c in body["config"]["cameras"]}
    assert "gate-cam" in cams and cams["plaza-cam"]["zones"][0]["polygon"][0] == [0.0, 0.35]
    assert cams["gate-cam"]["zones"][0]["rules"][0]["active_hours"][0]["start"] == "22:00:00"

    schema = env.client.get("/site/schema").json()
    assert set(schema["required"]) == {"name", "polygon"}
    rules = schema["properties"]["rules"]["items"]
    assert set(rules["discriminator"]["mapping"]) == set(RULE_TYPES)
    defs = schema["$defs"]
    assert defs["CrowdRule"]["properties"]["min_count"]["minimum"] == 1 and "min_count" in defs["CrowdRule"]["required"]
    assert defs["IntrusionRule"]["properties"]["min_confidence"]["default"] == 0.25
    assert defs["FireLaneRule"]["properties"]["classes"]["default"] == ["car", "truck", "bus", "motorcycle"]
    assert defs["LineCrossingRule"]["properties"]["direction"]["default"] == "both"
    assert "description" in defs["IntrusionRule"]["properties"]["cooldown_s"]


def test_create_replace_rename_delete_keep_comments_and_backup(env):
    c, site = env.client, env.site
    original = site.read_bytes()
    before = env.client.get("/site").json()["version"]
    r = c.put(ZONE.format("gate-cam", "bike-rack"), json=BIKES, headers={"If-Match": f'"{before}"'})
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["version"] == version(site) != before and out["zone"]["rules"][0]["cooldown_s"] == 30.0
    assert (site.parent / "site.yaml.bak").read_bytes() == original
    text = site.read_text()
    assert comments(text) == comments(original.decode())  # every operator comment survives
    assert "polygon: [[0.3, 0.6], [0.7, 0.6], [0.7, 0.95], [0.3, 0.95]]" in text
    assert [z.name for z in env.rules.config.cameras[0].zones] == ["sports-ground", "bike-rack"]
    assert c.get("/site").json()["version"] == out["version"]

    plaza_state = env.rules.table.get("plaza-cam")
    renamed = {"name": "plaza-north", "polygon": [[0, 0.5], [1, 0.5], [1, 1]], "rules": [{"type": "crowd", "min_count": 4}]}
    r = c.put(ZONE.format("plaza-cam", "plaza"), json=renamed)
    assert r.status_code == 200, r.text
    zones = yaml.safe_load(site.read_text())["cameras"][1]["zones"]
    assert [z["name"] for z in zones] == ["plaza-north"] and zones[0]["rules"][0]["min_count"] == 4
    assert "kind" not in zones[0]  # a replace is the body, not a merge
    assert env.rules.table.get("gate-cam") is not None and env.rules.table.get("plaza-cam") is not plaza_state
    assert comments(site.read_text()) == comments(original.decode())

    assert c.delete(ZONE.format("gate-cam", "bike-rack")).status_code == 200
    assert [z.name for z in env.rules.config.cameras[0].zones] == ["sports-ground"]
    assert comments(site.read_text()) == comments(original.decode())
    assert c.delete(ZONE.format("gate-cam", "bike-rack")).json()["error"] == "unknown_zone"


def test_deleting_a_cameras_only_zone_keeps_the_next_header(env):
    original = env.site.read_text()
    assert env.client.delete(ZONE.format("plaza-cam", "plaza")).status_code == 200, env.site.read_text()
    assert comments(env.site.read_text()) == comments(original)
    assert env.rules.config.cameras[1].zones == ()
    assert env.client.put(ZONE.format("plaza-cam", "bike-rack"), json=BIKES).status_code == 200  # and back
    assert comments(env.site.read_text()) == comments(original)


def test_deleting_the_first_zone_takes_its_own_header_only(tmp_path):
    """The comment lines above a zone belong to it: deleting the first of a camera's zones removes
    its header, keeps the second zone's header and a comment about the whole zones list."""
    text = EXAMPLE_SITE.read_text().replace(
        "    zones:\n      - name: sports-ground\n",
        "    zones:\n    # surveyed 2026-11 (all zones of this camera)\n"
        "      # SPORTS header: the pitch\n      - name: sports-ground\n", 1)
    text = text.replace("            cooldown_s: 120\n",
                        "            cooldown_s: 120\n      # BIKES header: the rack\n"
                        "      - name: bike-rack\n        polygon: [[0.3, 0.6], [0.7, 0.6], [0.7, 0.95]]\n", 1)
    site = tmp_path / "site.yaml"
    site.write_text(text)
    SiteFile(site).put_zone("gate-cam", "sports-ground", None)
    after = site.read_text()
    assert "SPORTS header" not in after and "surveyed 2026-11" in after
    lines = after.splitlines()
    i = lines.index("      # BIKES header: the rack")
    assert lines[i + 1] == "      - name: bike-rack"
    gone = ("SPORTS header", "crosses midnight")  # the zone's header and its own line comment
    assert comments(after) == [c for c in comments(text) if not any(g in c for g in gone)]
    assert [z["name"] for z in yaml.safe_load(after)["cameras"][0]["zones"]] == ["bike-rack"]


def test_state_of_other_cameras_is_kept(env):
    kept = env.rules.table.get("plaza-cam")
    assert env.client.put(ZONE.format("gate-cam", "bike-rack"), json=BIKES).status_code == 200
    assert env.rules.table.get("plaza-cam") is kept


@pytest.mark.parametrize("zone,field", [
    ({**BIKES, "polygon": [[0.1, 0.1], [0.5, 0.5]]}, "polygon"),
    ({**BIKES, "polygon": [[0.1, 0.1], [0.5, 1.5], [0.2, 0.9]]}, "polygon"),
    ({**BIKES, "rules": [{"type": "crowd", "min_count": 0}]}, "rules.0.min_count"),
    ({**BIKES, "rules": [{"type": "crowd"}]}, "rules.0.min_count"),
    ({**BIKES, "rules": [{"type": "intrusion", "min_confidence": "high"}]}, "rules.0.min_confidence"),
    ({**BIKES, "rules": [{"type": "teleport"}]}, "rules.0"),
    ({**BIKES, "rules": [{"type": "intrusion"}, {"type": "intrusion"}]}, "rules.1.name"),
    ({**BIKES, "name": "sports-ground"}, "name"),  # taken by another zone of the camera
    ({**BIKES, "name": "../../etc/passwd"}, "name"),
    ({**BIKES, "colour": "red"}, "colour"),
    ({"polygon": BIKES["polygon"]}, "name"),
])
def test_invalid_zone_is_422_per_field_and_changes_nothing(env, zone, field):
    before, running = env.site.read_bytes(), env.rules.config
    r = env.client.put(ZONE.format("gate-cam", "bike-rack"), json=zone)
    assert r.status_code == 422, r.text
    body = r.json()
    assert body["error"] == "invalid_site_config"
    assert field in [d["field"] for d in body["detail"]], body["detail"]
    assert all(set(d) == {"field", "message"} and d["message"] for d in body["detail"])
    assert env.site.read_bytes() == before and env.rules.config is running
    assert not (env.site.parent / "site.yaml.bak").exists()


def test_if_match_and_read_only(env, monkeypatch):
    c = env.client
    r = c.put(ZONE.format("gate-cam", "bike-rack"), json=BIKES, headers={"If-Match": "0123456789abcdef"})
    assert r.status_code == 412 and r.json()["error"] == "site_changed"
    before = env.site.read_bytes()
    monkeypatch.setattr("app.rules.site.writer.SiteFile.writable", lambda self: False)
    assert c.get("/site").json()["writable"] is False
    r = c.put(ZONE.format("gate-cam", "bike-rack"), json=BIKES)
    assert r.status_code == 409 and r.json()["error"] == "site_read_only" and "docs/console.md" in r.json()["message"]
    monkeypatch.undo()

    def read_only_fs(*args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr("app.rules.site.writer.tempfile.mkstemp", read_only_fs)  # writable() said yes, the write says no
    r = c.put(ZONE.format("gate-cam", "bike-rack"), json=BIKES)
    assert r.status_code == 409 and r.json()["error"] == "site_read_only"
    assert env.site.read_bytes() == before


def test_hostile_input(env):
    c = env.client
    before = env.site.read_bytes()
    url = ZONE.format("gate-cam", "bike-rack")
    garbage = c.put(url, content=b"{not json", headers={"content-type": "application/json"})
    assert garbage.status_code == 422 and garbage.json()["error"] == "invalid_parameter"
    assert c.put(url, json=[1, 2, 3]).status_code == 422
    huge = c.put(url, json={**BIKES, "polygon": [[0.5, 0.5]] * 40_000})
    assert huge.status_code == 413 and huge.json()["error"] == "payload_too_large"
    deep = '{"name": "x", "polygon": ' + "[" * 900 + "]" * 900 + "}"
    r = c.put(url, content=deep, headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"] == [{"field": "", "message": "the zone nests deeper than 8 levels"}]
    deeper = '{"name": ' + "[" * 50_000 + "]" * 50_000 + "}"
    too_deep = c.put(url, content=deeper, headers={"content-type": "application/json"})
    assert too_deep.status_code == 422 and too_deep.json()["error"] == "invalid_parameter"
    assert c.put(ZONE.format("no-such-cam", "x"), json=BIKES).json()["error"] == "unknown_camera"
    assert c.put("/admin/site/cameras/..%2F..%2Fetc/zones/x", json=BIKES).status_code == 404
    assert c.delete(ZONE.format("gate-cam", "..")).status_code == 404
    assert c.delete(ZONE.format("gate-cam", "..%5C..%5Csite.yaml")).json()["error"] == "unknown_zone"
    assert env.site.read_bytes() == before


def test_strings_yaml_would_misread_are_quoted(env):
    zone = {"name": "on", "kind": "yes", "polygon": BIKES["polygon"],
            "rules": [{"type": "intrusion", "active_hours": [{"start": "22:00", "end": "06:00"}]}]}
    r = env.client.put(ZONE.format("gate-cam", "on"), json=zone)
    assert r.status_code == 200, r.text
    saved = yaml.safe_load(env.site.read_text())["cameras"][0]["zones"][1]
    assert saved["name"] == "on" and saved["kind"] == "yes" and saved["rules"][0]["active_hours"][0]["start"] == "22:00"


def test_next_frame_is_evaluated_with_the_saved_zone(env):
    frame_people = people(1, y=0.8, x0=0.5)  # foot point inside bike-rack, outside sports-ground's hours
    assert env.rules.evaluate("gate-cam", at(0), (W, H), frame_people) == []
    assert env.client.put(ZONE.format("gate-cam", "bike-rack"), json=BIKES).status_code == 200
    events = env.rules.evaluate("gate-cam", at(1), (W, H), frame_people)
    assert [(e["zone"], e["rule"], e["state"]) for e in events] == [("bike-rack", "intrusion", "started")]


def test_concurrent_saves_are_serialized_and_if_match_catches_the_loser(env):
    from concurrent.futures import ThreadPoolExecutor

    names = [f"zone-{i}" for i in range(6)]
    with ThreadPoolExecutor(6) as pool:
        replies = list(pool.map(lambda n: env.client.put(ZONE.format("door-cam", n), json={**BIKES, "name": n}), names))
    assert [r.status_code for r in replies] == [200] * 6
    saved = yaml.safe_load(env.site.read_text())["cameras"][3]["zones"]
    assert sorted(z["name"] for z in saved) == sorted(["side-door", *names])

    v0 = env.client.get("/site").json()["version"]
    first = env.client.put(ZONE.format("door-cam", "a"), json={**BIKES, "name": "a"}, headers={"If-Match": v0})
    second = env.client.put(ZONE.format("door-cam", "b"), json={**BIKES, "name": "b"}, headers={"If-Match": v0})
    assert first.status_code == 200 and second.status_code == 412 and second.json()["error"] == "site_changed"
    assert "b" not in [z.name for z in env.rules.config.cameras[3].zones]


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o664])
def test_an_edit_keeps_the_files_mode_and_owner(env, mode):
    """Issue 23 finding 7: the site file and its backup keep the file's permissions (a 0644
    file other tools read must not become 0600) and, where the process may, its owner."""
    import os

    env.site.chmod(mode)
    owner = (65534, 65534) if os.geteuid() == 0 else (os.getuid(), os.getgid())  # root: give it to nobody
    os.chown(env.site, *owner)
    assert env.client.put(ZONE.format("gate-cam", "bike-rack"), json=BIKES).status_code == 200
    assert env.client.delete(ZONE.format("gate-cam", "bike-rack")).status_code == 200
    for path in (env.site, env.site.parent / "site.yaml.bak"):
        st = path.stat()
        assert (oct(st.st_mode & 0o7777), st.st_uid, st.st_gid) == (oct(mode), *owner), path
