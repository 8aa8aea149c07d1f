"""Camera secrets never shown (issue 42, findings 1, 2 and 9): URL forms ffmpeg reads as
``scheme://`` are refused and masked, a shown URL is built from the template (``${NAME}``,
never its value), ``${VAR}`` reads only camera credentials, and ``input_args`` holds input
options from one list."""

from __future__ import annotations

import logging
import shutil
import socket
import textwrap
import time

import httpx
import pytest

from app.api.routes.camera_summary import summarize
from app.core.redact import redact_text, redact_url, url_secrets
from app.ingest.command import input_options
from app.ingest.mailbox import SinkResult
from app.ingest.report import StateReporter
from app.ingest.source import SourceSpec, resolve_source
from app.ingest.states import CameraStats
from app.ingest.supervisor import Supervisor
from app.rules.site.loader import SiteConfigError, parse_site_text

PW = "hunter2-pw"


@pytest.mark.parametrize("url, shown", [
    (f"rtsp:/admin:{PW}@10.0.0.5:554/x", "rtsp://***@10.0.0.5:554/x"),
    (f"rtsp:admin:{PW}@10.0.0.5/x?token=T0KEN", "rtsp://***@10.0.0.5/x"),
    (f"RTSPS:/{PW}@nvr:7441/x", "rtsps://***@nvr:7441/x"),
    (f"http:admin:{PW}@cam.local/mjpg", "http://***@cam.local/mjpg"),
    ("file:clips/demo.mp4", "file:clips/demo.mp4"),
    ("rtsp:/10.0.0.5/x?token=T0KEN", "rtsp:/10.0.0.5/x"),
])
def test_every_url_form_ffmpeg_reads_is_masked(url, shown):
    assert redact_url(url) == shown
    if PW in url:
        assert PW in url_secrets(url)
        assert PW not in redact_text(f"{url}: Server returned 401 Unauthorized ({PW})", url_secrets(url))


def site(url: str, **source) -> str:
    extra = "".join(f", {k}: {v}" for k, v in source.items())
    return textwrap.dedent(f"""
        cameras:
          - id: gate-cam
            source: {{url: "{url}"{extra}}}
    """)


@pytest.mark.parametrize("url", [f"rtsp:/admin:{PW}@10.0.0.5/x", f"rtsp:admin:{PW}@10.0.0.5/x",
                                 "http:/cam.local/mjpg", "file:/srv/clips/demo.mp4", "rtsp:${CAMPUSGUARD_CAMERA_X}"])
def test_odd_url_forms_are_refused_with_the_field_named(url):
    with pytest.raises(SiteConfigError) as info:
        parse_site_text(site(url))
    assert info.value.errors[0].startswith("cameras[0].source.url: write the URL as ")
    assert PW not in str(info.value)


@pytest.mark.parametrize("url", ["rtsp://admin:x@10.0.0.5/x", "file:clips/demo.mp4", "file:///srv/demo.mp4",
                                 "${CAMPUSGUARD_CAMERA_URL}"])
def test_the_documented_forms_still_load(url):
    assert parse_site_text(site(url)).cameras[0].source.url == url


@pytest.mark.parametrize("name", ["CAMPUSGUARD_API_KEYS", "CAMPUSGUARD_EVENTS_DB_URL", "campusguard_webhook_secret"])
def test_a_setting_of_the_service_is_refused_as_a_variable(name):
    with pytest.raises(SiteConfigError) as info:
        parse_site_text(site(f"rtsp://10.0.0.5/${{{name}}}"))
    assert info.value.errors[0].startswith("cameras[0].source.url: ")
    assert "service's own settings" in info.value.errors[0]


def test_the_shown_url_is_the_template_and_every_value_filled_in_is_scrubbed(tmp_path):
    token = "TOKEN-abcdef-123"
    (tmp_path / "UNIFI_TOKEN").write_text(token)
    spec = SourceSpec(url="rtsps://${CAMPUSGUARD_CAMERA_USER}:${NVR_PW}@nvr:7441/${UNIFI_TOKEN}")
    (tmp_path / "NVR_PW").write_text("p@ss:word")
    source = resolve_source(spec, {"CAMPUSGUARD_CAMERA_USER": "viewer-user"}, tmp_path)
    assert source.url == f"rtsps://viewer-user:p%40ss%3Aword@nvr:7441/{token}"
    assert source.shown == "rtsps://***@nvr:7441/${UNIFI_TOKEN}"
    line = f"rtsps://viewer-user:p%40ss%3Aword@nvr:7441/{token}: 404 Not Found (token {token}, user viewer-user)"
    said = redact_text(line, source.secrets)
    assert token not in said and "p@ss" not in said and "viewer-user" not in said


def test_the_gateway_reports_the_template_never_the_filled_in_url(tmp_path):
    """What the gateway PUTs (``CameraState.as_dict()`` of the stats built from ``Resolved.shown``)."""
    token = "TOKEN-abcdef-123"
    (tmp_path / "UNIFI_TOKEN").write_text(token)
    source = resolve_source(SourceSpec(url="rtsps://nvr:7441/${UNIFI_TOKEN}"), {}, tmp_path)
    stats = CameraStats("gate-cam", source.shown, 1.0, None)
    bodies: list[bytes] = []

    def handler(request: httpx.Request) -> httpx.Response:
        bodies.append(request.content)
        return httpx.Response(204)

    reporter = StateReporter("http://svc", "camera-key-0123456789", lambda: {"gate-cam": stats.snapshot()},
                             transport=httpx.MockTransport(handler))
    reporter.report_once()
    assert bodies and token.encode() not in bodies[0] and b"${UNIFI_TOKEN}" in bodies[0]


def test_a_fleet_row_shared_by_another_replica_is_masked_on_the_tile():
    stream = {"state": "streaming", "source": f"rtsp:admin:{PW}@10.0.0.5/x",
              "last_error": f"password={PW} refused"}
    cam = {"id": "gate-cam", "status": "online", "offline_after_s": 60}
    tile = summarize(cam, stream)
    assert tile.stream is not None and tile.stream.source == "rtsp://***@10.0.0.5/x"
    assert PW not in tile.model_dump_json()


@pytest.mark.parametrize("args", [
    ["-skip_frame", "nokey"],
    ["-rtsp_flags", "prefer_tcp", "-probesize", "32", "-analyzeduration", "0", "-timeout", "5000000"],
    ["-fflags", "+nobuffer+genpts", "-reconnect", "1", "-user_agent", "Mozilla/5.0 (CampusGuard)"],
])
def test_allowed_input_options_reach_ffmpeg_before_the_input(args):
    spec = parse_site_text(site("rtsp://10.0.0.5/x", input_args=str(args).replace("'", '"'))).cameras[0].source
    assert input_options("rtsp://10.0.0.5/x", spec, 30)[-len(args):] == args


@pytest.mark.parametrize("args, words", [
    (["-i", "/run/secrets/camera-key", "-c", "copy", "-y", "/tmp/out"], "input_args[0] '-i' is not an allowed"),
    (["-skip_frame", "nokey", "/tmp/out.mkv"], "input_args[2] '/tmp/out.mkv' is an output or file name"),
    (["-dump_attachment:t", "/tmp/x"], "'-dump_attachment:t' is not an allowed"),
    (["-report"], "'-report' is not an allowed"),
    (["-f", "lavfi"], "'lavfi' is not a valid value of -f"),
    (["-f", "concat"], "'concat' is not a valid value of -f"),
    (["-skip_frame"], "-skip_frame needs a value"),
    (["-timeout", "http://evil/x"], "not a valid value of -timeout"),
])
def test_other_arguments_are_refused_with_the_field_named(args, words):
    with pytest.raises(SiteConfigError) as info:
        parse_site_text(site("rtsp://10.0.0.5/x", input_args=str(args).replace("'", '"')))
    assert info.value.errors[0].startswith("cameras[0].source.input_args: ")
    assert words in info.value.errors[0], info.value.errors[0]


def test_the_watchdogs_log_lines_and_state_show_the_template(tmp_path, caplog):
    """A real ffmpeg refused by a closed port: its error line repeats the filled-in URL; neither
    the state (what GET /cameras and the gateway's report show) nor a log line holds the token."""
    if shutil.which("ffmpeg") is None:
        pytest.skip("ffmpeg is not installed")
    token = "TOKEN-abcdef-123"
    (tmp_path / "UNIFI_TOKEN").write_text(token)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed once the block ends: connection refused
    spec = SourceSpec(url=f"rtsp://127.0.0.1:{port}/${{UNIFI_TOKEN}}", stall_after_s=5)
    supervisor = Supervisor(lambda cid: (lambda frame: SinkResult.sent()), secrets_dir=tmp_path)
    try:
        with caplog.at_level(logging.DEBUG, logger="app.ingest"):
            supervisor.start({"gate-cam": spec})
            deadline = time.monotonic() + 30
            while supervisor.states()["gate-cam"].last_error is None and time.monotonic() < deadline:
                time.sleep(0.1)
        seen = supervisor.states()["gate-cam"]
    finally:
        supervisor.stop()
    assert seen.last_error is not None and seen.state.value == "unreachable", seen
    assert seen.source == f"rtsp://127.0.0.1:{port}/${{UNIFI_TOKEN}}"
    assert token not in str(seen.as_dict())
    lines = [r.getMessage() for r in caplog.records]
    assert any("${UNIFI_TOKEN}" in line for line in lines) and not any(token in line for line in lines), lines
