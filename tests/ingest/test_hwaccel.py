"""``hwaccel: auto``: NVDEC or VA-API on a GPU replica whose node exposes them, none elsewhere (a CPU
replica, a camera gateway), decided once from injected probes; the ffmpeg argv follows it."""

from __future__ import annotations

import shutil
import stat

import pytest

from app.config import Settings
from app.ingest.command import build_command
from app.ingest.frames import FrameFormat
from app.ingest.hwaccel import HwaccelProbes, auto_hwaccel, ffmpeg_hwaccels, with_auto
from app.ingest.source import SourceSpec
from app.wiring import ingest_options

URL = "rtsp://10.0.0.5/cam"


def probes(listed: set[str], nvidia: bool = False, render: bool = False, calls: list[str] | None = None):
    def seen(name, value):
        def probe():
            if calls is not None:
                calls.append(name)
            return value
        return probe

    return HwaccelProbes(seen("ffmpeg", frozenset(listed)), seen("nvidia", nvidia), seen("render", render))


@pytest.mark.parametrize(("listed", "nvidia", "render", "expected"), [
    ({"cuda", "vaapi"}, True, True, "cuda"),  # NVDEC first
    ({"cuda", "vaapi"}, False, True, "vaapi"),  # an AMD node (ROCm) or Intel: VA-API
    ({"vaapi"}, True, True, "vaapi"),  # an ffmpeg built without cuda
    ({"cuda"}, False, False, "none"),  # ffmpeg can, the node has no device
    ({"vdpau", "drm"}, True, True, "none"),
    (set(), True, True, "none"),  # ffmpeg missing
])
def test_auto_on_a_gpu_replica_picks_what_the_node_exposes(listed, nvidia, render, expected):
    assert auto_hwaccel(True, probes(listed, nvidia, render)) == expected


def test_auto_on_a_cpu_replica_is_none_without_probing():
    calls: list[str] = []
    assert auto_hwaccel(False, probes({"cuda", "vaapi"}, True, True, calls)) == "none"
    assert calls == []


def test_the_resolved_value_reaches_the_ffmpeg_argv():
    sources = {"a": SourceSpec(url=URL, hwaccel="auto"), "b": SourceSpec(url=URL, hwaccel="vaapi"),
               "c": SourceSpec(url=URL)}
    resolved = with_auto(sources, "cuda")
    assert [s.hwaccel for s in resolved.values()] == ["cuda", "vaapi", "none"]
    argv = build_command(URL, resolved["a"], FrameFormat.RGB)
    assert argv[argv.index("-hwaccel") + 1] == "cuda"
    # unresolved (a camera gateway pulls it): auto is no hardware decode at all
    assert "-hwaccel" not in build_command(URL, sources["a"], FrameFormat.JPEG)


def test_the_wiring_resolves_auto_once_per_replica():
    gpu = Settings(_env_file=None, device="cuda:0")
    assert ingest_options(gpu, probes({"cuda"}, nvidia=True)).hwaccel_auto == "cuda"
    assert ingest_options(gpu, probes({"vaapi"}, render=True)).hwaccel_auto == "vaapi"
    calls: list[str] = []
    assert ingest_options(Settings(_env_file=None), probes({"cuda"}, True, True, calls)).hwaccel_auto == "none"
    assert calls == []


def test_ffmpeg_hwaccels_reads_the_list(tmp_path):
    fake = tmp_path / "ffmpeg"
    fake.write_text("#!/bin/sh\nprintf 'Hardware acceleration methods:\\nvdpau\\ncuda\\nvaapi\\n\\n'\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    assert ffmpeg_hwaccels(str(fake)) == {"vdpau", "cuda", "vaapi"}
    assert ffmpeg_hwaccels(str(tmp_path / "missing")) == frozenset()
    if shutil.which("ffmpeg"):  # the real one answers a set (what it holds depends on its build)
        assert isinstance(ffmpeg_hwaccels(), frozenset)
