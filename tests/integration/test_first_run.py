"""The newcomer's path (issue 42): the starter site file and the README's curl call raise an
event with the real model, at any hour of the day."""

from __future__ import annotations

import pytest

from app.tooling.demo.site import ensure_starter
from tests.conftest import start_server, ultralytics_asset

pytestmark = pytest.mark.server


def test_the_readmes_curl_call_raises_an_event_on_the_starter_site(tmp_path, weights):
    site = tmp_path / "site.yaml"
    assert ensure_starter(site)
    server = start_server(tmp_path, weights, site_config=site, data_dir=tmp_path / "data")
    try:
        bus = ultralytics_asset("bus.jpg").read_bytes()
        with server.client() as client:  # exactly the README's call: multipart `image`, camera_id=front-door
            reply = client.post("/detect", params={"camera_id": "front-door"},
                                files={"image": ("bus.jpg", bus, "image/jpeg")})
            assert reply.status_code == 200, reply.text
            body = reply.json()
            started = [e for e in body["events"] if e["state"] == "started"]
            assert [(e["zone"], e["rule"]) for e in started] == [("entrance", "intrusion")], body["events"]
            listed = client.get("/events", params={"camera_id": "front-door"}).json()
            assert [item["rule"] for item in listed["items"]] == ["intrusion"]
    finally:
        server.stop()
