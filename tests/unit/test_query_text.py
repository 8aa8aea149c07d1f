"""Query parameters that no database can take (issue 42, finding 7): a lone surrogate or a NUL in
``GET /events?cursor=``, ``GET /audit?actor=`` and ``?action=`` is a 422 like any other bad
parameter, never a 500 from the event store (SQLite in process; PostgreSQL refuses NUL too)."""

from __future__ import annotations

import base64
import json

import pytest

from tests.support import audit_app
from tests.support.audit_app import ALICE, as_

pytestmark = pytest.mark.timeout(120)
env = audit_app.env  # the fixture: the site app with the three keys


def _cursor(event_id: str) -> str:
    return base64.urlsafe_b64encode(json.dumps(["2026-03-02T12:00:00Z", event_id]).encode()).decode().rstrip("=")


@pytest.mark.parametrize("cursor", ["a\x00b", _cursor("\ud800"), _cursor("evt\x00")])
def test_a_bad_cursor_is_a_422(env, cursor):  # noqa: F811
    r = as_(env, ALICE, "10.0.0.1").get("/events", params={"cursor": cursor})
    assert r.status_code == 422, r.text
    assert "\x00" not in r.text and "\\ud800" not in r.text


@pytest.mark.parametrize("name", ["actor", "action"])
@pytest.mark.parametrize("value", ["x\x00y", "\x00"])
def test_a_bad_audit_filter_is_a_422(env, name, value):  # noqa: F811
    r = as_(env, ALICE, "10.0.0.1").get("/audit", params={name: value})
    assert r.status_code == 422, r.text
