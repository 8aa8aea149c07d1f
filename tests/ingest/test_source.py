"""A camera's source block: what is accepted, what is refused (field named), how ${VAR} is
filled in, and how every URL is shown (never a password or a query string)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

from app.core.redact import redact_text, redact_url, url_secrets
from app.ingest.gateway import load_sources
from app.core.sharding import shard_of
from app.ingest.httpsink import parse_shard
from app.ingest.source import SourceError, SourceSpec, resolve, resolve_all, resolve_site
from app.rules.site.loader import SiteConfigError, parse_site_text

ISSUE_EXAMPLE = """
cameras:
  - id: gate-cam
    source:
      url: rtsp://${GATE_CAM_USER}:${GATE_CAM_PASSWORD}@10.0.0.5:554/Streaming/Channels/102
      fps: 2
"""


def test_the_issue_example_and_defaults():
    spec = SourceSpec.model_validate(yaml.safe_load(ISSUE_EXAMPLE)["cameras"][0]["source"])
    assert (spec.fps, spec.transport, spec.max_width, spec.hwaccel) == (2, "tcp", 1280, "none")
    assert (spec.stall_after_s, spec.max_backoff_s, spec.input_args) == (20, 30, ())
    assert spec.variables == ["GATE_CAM_USER", "GATE_CAM_PASSWORD"]
    assert SourceSpec(url="file:///tmp/x.mp4").fps == 1


@pytest.mark.parametrize("block, field, words", [
    ({"url": "ftp://10.0.0.5/cam"}, "url", "'ftp'"),
    ({"url": "10.0.0.5/cam"}, "url", "no scheme"),
    ({"url": "rtsp://x/${BAD-NAME}"}, "url", "BAD-NAME"),
    ({"url": "rtsp://x/${OPEN"}, "url", "unclosed"),
    ({"url": "rtsp://x/cam", "fps": 0}, "fps", "greater than 0"),
    ({"url": "rtsp://x/cam", "fps": -1}, "fps", "greater than 0"),
    ({"url": "rtsp://x/cam", "fps": 31}, "fps", "less than or equal to 30"),
    ({"url": "rtsp://x/cam", "transport": "sctp"}, "transport", "tcp"),
    ({"url": "rtsp://x/cam", "hwaccel": "opencl"}, "hwaccel", "vaapi"),
    ({"url": "rtsp://x/cam", "stall_after_s": 0}, "stall_after_s", "greater than or equal to 1"),
    ({"url": "rtsp://x/cam", "colour": "red"}, "colour", "not permitted"),
])
def test_bad_source_is_refused_with_the_field_named(block, field, words):
    with pytest.raises(ValidationError) as info:
        SourceSpec.model_validate(block)
    errors = info.value.errors()
    assert [e["loc"][0] for e in errors] == [field]
    assert words in errors[0]["msg"]


def test_site_file_errors_name_camera_and_field(tmp_path):
    site = tmp_path / "site.yaml"
    site.write_text(textwrap.dedent("""
        cameras:
          - id: gate-cam
            source: {url: "gopher://10.0.0.5/x", fps: 0}
          - id: plaza-cam
          - id: lot-cam
            source: {url: "rtsp://10.0.0.6/x", fps: 31}
    """))
    with pytest.raises(SiteConfigError) as info:
        load_sources(site)  # the gateway reads the site file with the service's own loader
    assert info.value.errors == [
        "cameras[0].source.url: unsupported scheme 'gopher' in 'gopher://10.0.0.5/x': use one of rtsp://, rtsps://, "
        "http://, https://, file://",
        "cameras[0].source.fps: Input should be greater than 0",
        "cameras[2].source.fps: Input should be less than or equal to 30"]  # plaza-cam has no source: fine


def test_resolve_from_environment_and_secrets_dir(tmp_path):
    spec = SourceSpec(url="rtsp://${CAMPUSGUARD_CAMERA_USER}:${CAM_PASSWORD}@10.0.0.5:554/ch/${CAMPUSGUARD_CAMERA_CH}")
    (tmp_path / "CAM_PASSWORD").write_text("p@ss:w/rd?#1\n")
    env = {"CAMPUSGUARD_CAMERA_USER": "guard", "CAMPUSGUARD_CAMERA_CH": "102"}
    url = resolve(spec, env, tmp_path)
    # the password is percent-encoded in the user info (ffmpeg decodes it); the path is as given
    assert url == "rtsp://guard:p%40ss%3Aw%2Frd%3F%231@10.0.0.5:554/ch/102"
    # one rule for every secret (app/core/secrets.py): the secrets directory wins over the environment
    spec = SourceSpec(url="rtsp://${CAMPUSGUARD_CAMERA_USER}:${CAMPUSGUARD_CAMERA_PW}@10.0.0.5/x")
    (tmp_path / "CAMPUSGUARD_CAMERA_PW").write_text("from-file")
    env = {"CAMPUSGUARD_CAMERA_USER": "g", "CAMPUSGUARD_CAMERA_PW": "env"}
    assert resolve(spec, env, tmp_path).startswith("rtsp://g:from-file@")
    assert resolve(spec, env).startswith("rtsp://g:env@")
    # $${ is a literal ${ (not a variable)
    assert resolve(SourceSpec(url="rtsp://cam/a$${b}"), {}) == "rtsp://cam/a${b}"


def test_unset_variable_names_the_variable_and_field(tmp_path):
    spec = SourceSpec(url="rtsp://admin:${GATE_CAM_PASSWORD}@10.0.0.5/x")
    with pytest.raises(SourceError) as info:
        resolve(spec, {"OTHER": "secret-value"}, tmp_path)
    assert info.value.field == "source.url"
    assert "${GATE_CAM_PASSWORD} is not defined" in str(info.value) and str(tmp_path) in str(info.value)
    assert "secret-value" not in str(info.value)
    with pytest.raises(SourceError) as info:
        resolve_all({"gate-cam": spec, "ok-cam": SourceSpec(url="file:///x.mp4")}, {})
    assert info.value.field == "cameras[gate-cam].source.url"


def test_resolve_site_names_each_camera_field_and_only_the_shard(tmp_path):
    config = parse_site_text(textwrap.dedent("""
        cameras:
          - id: plaza-cam
          - id: gate-cam
            source: {url: "rtsp://admin:${GATE_PW}@10.0.0.5/x"}
          - id: lot-cam
            source: {url: "rtsp://${LOT_USER}:${LOT_PW}@10.0.0.6/x"}
    """))
    (tmp_path / "LOT_USER").write_text("u")
    with pytest.raises(SiteConfigError) as info:
        resolve_site(config, {"LOT_USER": "u"}, tmp_path, "site.yaml")
    assert [e.split(":")[0] for e in info.value.errors] == ["cameras[1].source.url", "cameras[2].source.url"]
    assert "${GATE_PW} is not defined" in info.value.errors[0] and "${LOT_PW}" in info.value.errors[1]
    (tmp_path / "GATE_PW").write_text("pw")
    assert resolve_site(config, {}, tmp_path, only={"gate-cam"}) == {"gate-cam": "rtsp://admin:pw@10.0.0.5/x"}


def test_a_whole_url_variable_is_checked_once_filled_in():
    spec = SourceSpec(url="${CAMPUSGUARD_CAMERA_URL}")
    assert resolve(spec, {"CAMPUSGUARD_CAMERA_URL": "rtsps://cam.local/live"}) == "rtsps://cam.local/live"
    with pytest.raises(SourceError, match="unsupported scheme 'smb'"):
        resolve(spec, {"CAMPUSGUARD_CAMERA_URL": "smb://u:pw@nas/x"})
    # filled in, the URL is held to the scheme:// form too; the error shows the template, not the value
    with pytest.raises(SourceError, match="write the URL as rtsp://") as info:
        resolve(spec, {"CAMPUSGUARD_CAMERA_URL": "rtsp:/admin:hunter2@10.0.0.5/x"})
    assert "hunter2" not in str(info.value) and "${CAMPUSGUARD_CAMERA_URL}" in str(info.value)


@pytest.mark.parametrize("url, shown", [
    ("rtsp://admin:hunter2@10.0.0.5:554/Streaming/Channels/102", "rtsp://***@10.0.0.5:554/Streaming/Channels/102"),
    ("rtsp://10.0.0.5/live", "rtsp://10.0.0.5/live"),
    ("https://cam.local/mjpg/video.cgi?user=admin&pwd=hunter2", "https://cam.local/mjpg/video.cgi"),
    ("RTSP://u:p@ss/w#rd@10.0.0.5/x?y", "rtsp://***@10.0.0.5/x"),  # unescaped @ / # in a password
    ("http://token@cam.local/#frag", "http://***@cam.local/"),
    ("file:///srv/clips/demo.mp4", "file:///srv/clips/demo.mp4"),
])
def test_redact_url(url, shown):
    assert redact_url(url) == shown


def test_redact_text_hides_urls_and_known_secrets():
    url = "rtsp://cam:s3cr%3At@10.0.0.5:554/x?token=abcdef"
    line = f"{url}: Server returned 401 Unauthorized; retry with s3cr:t or abcdef"
    shown = redact_text(line, url_secrets(url))
    assert shown == "rtsp://***@10.0.0.5:554/x: Server returned 401 Unauthorized; retry with *** or ***"


def test_shard_is_stable_across_processes_and_spread():
    ids = [f"cam-{i}" for i in range(400)]
    here = [shard_of(cid, 3) for cid in ids]
    code = "import sys; from app.core.sharding import shard_of; print(','.join(str(shard_of(f'cam-{i}', 3)) for i in range(400)))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                           cwd=Path(__file__).resolve().parents[2],
                           env={**os.environ, "PYTHONHASHSEED": "12345"}).stdout.strip()
    assert other == ",".join(map(str, here))  # not Python's salted hash()
    assert all(90 < here.count(i) < 180 for i in range(3))
    assert parse_shard("1/3") == (1, 3)
    for bad in ("3/3", "-1/2", "1", "a/b", "0/0"):
        with pytest.raises(ValueError, match="shard"):
            parse_shard(bad)
