"""The zone editor as a property (issue 23): arbitrary strings, numbers and polygons through
``PUT /admin/site/cameras/{id}/zones/{name}`` on the real app and site file. Every accepted edit
reads back unchanged through ``GET /site`` (and from the file), every refused one leaves the
file byte for byte as it was, and ``GET /site`` always answers 200."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from app.rules.site.loader import load_site_config
from app.rules.site.schema import IDENT, RULE_TYPES
from tests.support.console_util import site_app

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]  # 120 examples through the HTTP editor: 50 s in the suite
URL = "/admin/site/cameras/gate-cam/zones/{}"

SPECIAL = "\x00\x85\u2028\u2029\ufeff\t\r\n :#'\"-?[]{},&*!|>%@`~=\\"
text = st.text(st.one_of(st.characters(codec=None), st.sampled_from(SPECIAL),
                         st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF)), max_size=12)  # lone surrogates too
hostile = st.one_of(text, st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(),
                    st.integers(-3, 10**30), st.sampled_from([1e-7, 1e16, 2**53 + 1, -0.0, 1e308, 5e-324]),
                    st.lists(st.integers(0, 1), max_size=2), st.dictionaries(text, st.integers(), max_size=1))
unit = st.one_of(st.floats(0, 1), st.floats(0, 1).map(lambda v: round(v, 3)), st.sampled_from([0, 1, 0.5]))
seconds = st.one_of(st.floats(0, 10**6), st.integers(0, 3600), st.sampled_from([1e-7, 0.25]))
polygon = st.one_of(  # a star-shaped polygon (never collinear) or any points at all
    st.lists(st.floats(0.05, 0.45), min_size=3, max_size=12).map(lambda radii: [
        [round(0.5 + r * math.cos(2 * math.pi * i / len(radii)), 4), round(0.5 + r * math.sin(2 * math.pi * i / len(radii)), 4)]
        for i, r in enumerate(radii)]),
    st.lists(st.lists(unit, min_size=2, max_size=2), min_size=3, max_size=12))
line = st.lists(st.lists(unit, min_size=2, max_size=2), min_size=2, max_size=6)
ident = st.from_regex(IDENT, fullmatch=True)
classes = st.lists(st.one_of(st.sampled_from(["person", "car", "bicycle"]), text.map(lambda t: f"<{t}>")),
                   min_size=1, max_size=3)  # any text inside, none of it at the ends
COMMON = {"name": ident, "classes": classes, "min_confidence": unit, "min_area": unit, "cooldown_s": seconds,
          "clear_after_s": seconds, "min_frames": st.integers(1, 50), "snapshot": st.one_of(st.booleans(), st.none()),
          "exclude": st.lists(polygon, max_size=2), "timezone": st.sampled_from(["UTC", "Europe/Berlin"])}
rule = st.one_of(
    st.fixed_dictionaries({"type": st.just("intrusion")}, optional=COMMON),
    st.fixed_dictionaries({"type": st.just("crowd"), "min_count": st.integers(1, 100)}, optional=COMMON),
    st.fixed_dictionaries({"type": st.just("fire_lane"), "min_duration_s": seconds}, optional=COMMON),
    st.fixed_dictionaries({"type": st.just("loitering"), "min_duration_s": st.floats(0.1, 10**5)}, optional=COMMON),
    st.fixed_dictionaries({"type": st.just("line_crossing"), "line": line},
                          optional={**COMMON, "direction": st.sampled_from(["in", "out", "both"])}))
zone = st.fixed_dictionaries({"name": ident, "polygon": polygon},
                             optional={"kind": st.one_of(ident, ident, text),
                                       "rules": st.lists(rule, max_size=3, unique_by=lambda r: r.get("name", r["type"]))})


def leaves(value: Any, path: tuple = ()) -> list[tuple]:
    """The paths of every scalar in a zone (the places a hostile value can go)."""
    if isinstance(value, dict):
        return [p for k, v in value.items() for p in leaves(v, (*path, k))]
    if isinstance(value, list):
        return [p for i, v in enumerate(value) for p in leaves(v, (*path, i))] or [path]
    return [path]


def put_at(value: Any, path: tuple, new: Any) -> None:
    for part in path[:-1]:
        value = value[part]
    value[path[-1]] = new


def same(sent: Any, got: Any) -> bool:
    """``got`` (GET /site) holds ``sent`` unchanged: every field sent, with its value (numbers
    equal, a bool still a bool; the reply fills in defaults beside them)."""
    if isinstance(sent, dict):
        return isinstance(got, dict) and all(k in got and same(v, got[k]) for k, v in sent.items())
    if isinstance(sent, list):
        return isinstance(got, list) and len(sent) == len(got) and all(map(same, sent, got))
    if isinstance(sent, bool) or isinstance(got, bool):
        return sent is got
    if isinstance(sent, (int, float)):
        return isinstance(got, (int, float)) and math.isfinite(sent) and sent == got
    return sent == got


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    with site_app(tmp_path_factory.mktemp("zone-props")) as ip:
        yield ip


def gate_zones(env) -> list[dict]:
    r = env.client.get("/site")
    assert r.status_code == 200, r.text
    return next(c for c in r.json()["config"]["cameras"] if c["id"] == "gate-cam")["zones"]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(data=st.data())
def test_accepted_edits_read_back_unchanged_and_refused_ones_write_nothing(env, data):
    body = data.draw(zone, label="zone")  # a valid zone (arbitrary class names and kinds) ...
    if data.draw(st.booleans(), label="mutate"):  # ... or one with a hostile value somewhere in it
        put_at(body, data.draw(st.sampled_from(leaves(body)), label="where"), data.draw(hostile, label="value"))
    if data.draw(st.integers(0, 9), label="extra key") == 0:
        body[data.draw(text, label="key")] = data.draw(hostile, label="extra")
    before, zones_before = env.site.read_bytes(), gate_zones(env)
    payload = json.dumps(body, allow_nan=True).encode()  # NaN/Infinity and lone surrogates (\udXXX) as sent by a client
    r = env.client.put(URL.format("prop"), content=payload, headers={"content-type": "application/json"})
    assert r.status_code in (200, 422), r.text
    after = gate_zones(env)  # GET /site answers 200 whatever was sent
    event(f"HTTP {r.status_code}")
    if r.status_code == 422:
        assert env.site.read_bytes() == before and after == zones_before
        assert r.json()["error"] in ("invalid_site_config", "invalid_parameter")
        return
    saved = next(z for z in after if z["name"] == body["name"])
    assert same(body, saved), (body, saved)
    assert saved == r.json()["zone"]
    from_file = next(z for c in load_site_config(env.site).cameras if c.id == "gate-cam" for z in c.zones
                     if z.name == body["name"])
    assert from_file.model_dump(mode="json") == saved  # the file itself, read as a restart would
    gone = env.client.delete(URL.format(body["name"]))  # back to the example, so the next example starts there
    assert gone.status_code == 200 and gate_zones(env) == zones_before
