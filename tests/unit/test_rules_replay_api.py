"""POST /admin/reload?dry_run=true in-process: the body's site file validated and replayed over
the detection log, nothing applied; bad, hostile and oversized bodies get a clear 4xx."""

from __future__ import annotations

import json

import pytest
import yaml

from app.api.dryrun import MAX_SITE_BYTES
from app.core.timeutil import iso
from app.rules.service.dryrun import DryRunner, DryRunOptions
from tests.support.inprocess import inprocess_app
from tests.support.replay import SITE, record
from tests.support.rules_util import at

WINDOW = {"dry_run": "true", "since": iso(at(0)), "until": iso(at(3600))}


@pytest.fixture(scope="module")
def app(tmp_path_factory):
    svc, settings = record(tmp_path_factory.mktemp("dryrun"))
    # the results are the point here, so the worker runs at normal priority (a loaded test machine
    # would starve the idle class); priority, the CPU cap and one-at-a-time: tests/unit/test_dry_runs.py
    svc.dry_runs = DryRunner(DryRunOptions(settings.events_db_url, idle=False, timeout_s=120))
    settings = settings.model_copy(update={"max_body_bytes": 8 * 1024 * 1024})
    with inprocess_app(settings, ready=False, rules=svc) as ip:
        ip.rules = svc
        yield ip
    svc.stop()


def post(app, body: bytes | str, content_type: str | None = "application/yaml", **params):
    headers = {"content-type": content_type} if content_type else {}
    params = {k: v for k, v in {**WINDOW, **params}.items() if v is not None}
    return app.client.post("/admin/reload", params=params, content=body, headers=headers)


def changed(**rule) -> dict:
    site = json.loads(json.dumps(SITE))
    site["cameras"][0]["zones"][0]["rules"][0].update(rule)
    return site


def test_dry_run_replays_without_applying_anything(app):
    svc = app.rules
    config, loaded_at, file_bytes = svc.config, svc.loaded_at, svc.path.read_bytes()
    frames = svc.store.frames.count(["plaza", "gate"], at(0), at(3600))
    events = svc.store.events.query(limit=500)

    same = post(app, yaml.safe_dump(SITE))
    assert same.status_code == 200, same.text
    body = same.json()
    assert body["dry_run"] is True and body["frames"] == 100 and body["cameras"] == ["plaza", "gate"]
    assert body["totals"] == {"recorded": 3, "replayed": 3, "matched": 3, "only_recorded": 0, "only_replayed": 0}

    # a stricter crowd (4 people): the second gathering (3 people, 35 s to 50 s) disappears
    stricter = post(app, json.dumps(changed(min_count=4)), "application/json")
    assert stricter.status_code == 200, stricter.text
    crowd = next(r for r in stricter.json()["rules"] if r["rule"] == "crowd")
    assert crowd["only_recorded"] == [{"started_at": iso(at(35)), "ended_at": iso(at(50))}]
    assert crowd["matched"] == 1 and crowd["only_replayed"] == []
    for media in ("text/yaml", "text/plain; charset=utf-8"):
        assert post(app, yaml.safe_dump(changed(min_count=4)), media).json()["totals"]["only_recorded"] == 1

    # nothing applied: the running config, the file, the log and the events are as before
    assert svc.config is config and svc.loaded_at == loaded_at and svc.path.read_bytes() == file_bytes
    assert [r.name for r in svc.table.get("plaza").zones[0].rules] == ["crowd"]
    assert svc.store.frames.count(["plaza", "gate"], at(0), at(3600)) == frames
    assert svc.store.events.query(limit=500) == events


def test_window_parameters(app):
    late = post(app, yaml.safe_dump(SITE), since=None, until=None)  # default: the last 24 h, nothing logged
    assert late.status_code == 422 and late.json()["error"] == "empty_window"
    assert "no logged frames" in late.json()["message"]
    narrow = post(app, yaml.safe_dump(SITE), since=None, until=iso(at(40)), window_h=37 / 3600)  # from 3 s
    assert narrow.status_code == 200 and narrow.json()["frames"] == 2 * 37
    backwards = post(app, yaml.safe_dump(SITE), since=iso(at(50)), until=iso(at(10)))
    assert backwards.status_code == 422 and "must be before until" in backwards.json()["message"]
    assert post(app, yaml.safe_dump(SITE), window_h=0).status_code == 422


BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(8))


@pytest.mark.parametrize("body, content_type, status, code, fragment", [
    ("cameras:\n  - id: plaza\n    zones:\n      - name: z\n        polygon: [[0, 0], [1, 0]]\n        rules:\n"
     "          - {type: crowd, min_count: 0}\n  - {id: plaza}\n", "application/yaml", 422, "invalid_site_config",
     "3 error(s)"),
    ("", "application/yaml", 422, "invalid_site_config", "the site file is empty"),
    ("cameras:\n  - id: plaza\n    zones: [{name: z, polygon: [[0, 0], [1,", "application/yaml", 422,
     "invalid_site_config", "YAML syntax error"),
    ('{"cameras": [{"id": "pl', "application/json", 422, "invalid_site_config", "JSON syntax error"),
    (b"\xff\xfe\x00garbage", "application/yaml", 422, "invalid_site_config", "not UTF-8"),
    ("just a string", "text/plain", 422, "invalid_site_config", "expected a mapping"),
    (BOMB, "application/yaml", 422, "invalid_site_config", "expands to more than"),
    ("[" * 5000 + "]" * 5000, "application/yaml", 422, "invalid_site_config", "nested too deeply"),
    ("[" * 100000 + "]" * 100000, "application/json", 422, "invalid_site_config", "nested too deeply"),
    ("cameras: []\n" + "#" * MAX_SITE_BYTES, "application/yaml", 413, "payload_too_large", "at most"),
    ("x" * (9 * 1024 * 1024), "application/yaml", 413, "payload_too_large", ""),  # over max_body_bytes
    (yaml.safe_dump(SITE), "image/png", 415, "unsupported_media_type", "application/yaml"),
    (yaml.safe_dump(SITE), None, 415, "unsupported_media_type", "no Content-Type"),
])
def test_bad_bodies_get_a_clear_4xx(app, body, content_type, status, code, fragment):
    r = post(app, body, content_type)
    assert r.status_code == status, r.text
    assert r.json()["error"] == code and fragment in r.json()["message"], r.json()


def test_invalid_site_lists_every_error_in_detail(app):
    r = post(app, yaml.safe_dump({"cameras": [{"id": "a", "zones": [{"name": "z", "polygon": [[0, 0]]}]},
                                              {"id": "a"}], "timezone": "Mars/Olympus"}))
    assert r.status_code == 422 and len(r.json()["detail"]) == 3, r.json()


def test_openapi_documents_the_dry_run(app):
    spec = app.app.openapi()
    op = spec["paths"]["/admin/reload"]["post"]
    assert {"application/yaml", "text/plain", "application/json"} <= set(op["requestBody"]["content"])
    assert "dry_run" in {p["name"] for p in op["parameters"]}
    assert "DryRunResult" in spec["components"]["schemas"] and "ReplayRule" in spec["components"]["schemas"]
    assert {"413", "415", "422"} <= set(op["responses"])


@pytest.mark.parametrize("params, code", [
    ({"since": "0001-01-01T00:00:00Z", "until": "0001-01-01T00:30:00Z"}, "empty_window"),
    ({"since": "9999-12-31T00:00:00Z", "until": "9999-12-31T23:59:59Z"}, "empty_window"),
    ({"since": None, "until": "0001-01-01T01:00:00Z", "window_h": 8000}, "invalid_parameter")])  # clamped to year 1
def test_windows_at_the_ends_of_time_are_a_clear_422_not_a_crash(app, params, code):
    r = post(app, yaml.safe_dump(SITE), **params)
    assert r.status_code == 422 and r.json()["error"] == code, r.text
