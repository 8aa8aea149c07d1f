"""Query parameters that no database can take (issue 42, finding 7): a lone surrogate or a NUL in
``GET /events?cursor=``, ``GET /audit?actor=`` and ``?action=`` is a 422 like any other bad
parameter, never a 500 from the event store, on SQLite and on PostgreSQL (``db_url``)."""

from __future__ import annotations

import base64
import json

import pytest

from tests.support import audit_app
from tests.support.audit_app import ALICE, as_

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def env(tmp_path, db_url):
    """The site app with the three keys, on SQLite, then on a real PostgreSQL (which refuses NUL in
    text with psycopg.DataError: the 500 of the finding)."""
    with audit_app.keyed_site_app(tmp_path, events_db_url=db_url) as ip:
        yield ip


def _cursor(event_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps(["2026-03-02T12:00:00Z", event_id]).encode()).decode().rstrip("=")


@pytest.mark.parametrize("cursor", ["a\x00b", _cursor("\ud800"), _cursor("evt\x00")])
def test_a_bad_cursor_is_a_422(env, cursor):
    r = as_(env, ALICE, "10.0.0.1").get("/events", params={"cursor": cursor})
    assert r.status_code == 422, r.text
    assert "\x00" not in r.text and "\\ud800" not in r.text


@pytest.mark.parametrize("name", ["actor", "action", "exclude_action"])
@pytest.mark.parametrize("value", ["x\x00y", "\x00"])  # a query string cannot carry a lone surrogate
def test_a_bad_audit_filter_is_a_422(env, name, value):
    r = as_(env, ALICE, "10.0.0.1").get("/audit", params={name: value})
    assert r.status_code == 422, r.text


def test_the_same_parameters_well_formed_reach_the_store(env):
    """The store behind ``env`` answers: good values of the same parameters are a 200."""
    admin = as_(env, ALICE, "10.0.0.1")
    assert admin.post("/admin/cameras/plaza-cam/reset").status_code == 200
    assert admin.get("/events", params={"cursor": _cursor("evt0")}).status_code == 200
    for name, value in (("actor", "alice"), ("action", "camera.reset"), ("exclude_action", "auth.refused")):
        r = admin.get("/audit", params={name: value})
        assert r.status_code == 200 and [i["action"] for i in r.json()["items"]] == ["camera.reset"], r.text
