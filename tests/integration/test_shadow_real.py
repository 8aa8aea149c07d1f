"""The shadow lane with real models (in-process, no socket): an ONNX Runtime primary at 320
with the service's reduced JPEG decode against a torch fp32 reference on the fully decoded
originals, on coco-val128 frames.

1. The agreement the lane reports equals the F1 of what `campusguard parity` (its own
   detection code and ``compare``) says about the same frames, within 0.01.
2. A primary that lost a class (a fault injected through the backend registry, as the
   reliability tests do) drives its camera's agreement down, and the worst frames show the
   reference's boxes it missed.
3. The series that broken primary exported, scrape after scrape, fire the shipped alert rule
   (deploy/prometheus/alerts.yml, under `promtool test rules`) 15 minutes after its window
   holds 50 compared frames, and not before.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from app.api.state import state_of
from app.commands.parity import detect_all
from app.config import Settings
from app.inference.backends.registry import BACKENDS
from app.tooling.bench.parity import compare
from tests.deploy.conftest import ALERT_RULES, require_tool
from tests.support.faults import FaultInjectingDetector, Faults, FaultSwitch
from tests.support.shadow import real_shadow_app

IMGSZ = 320
FRAMES = 8
PERSON = 0
ROUNDS = 7  # of the FRAMES frames through the broken primary: 56 compared, past the alert's 50-frame floor
ALERT = "CampusGuardShadowDisagreement"
REPLICA = {"job": "campusguard", "instance": "detector-0:8000", "replica": "detector-0"}


@pytest.fixture(scope="module")
def frames(dataset, tmp_path_factory):
    """The FRAMES images with the most labelled persons (a camera's scene, and the class the fault drops)."""
    folder = tmp_path_factory.mktemp("shadow-frames")

    def persons(path) -> int:
        labels = dataset / "labels" / f"{path.stem}.txt"
        rows = labels.read_text().split("\n") if labels.is_file() else []
        return sum(1 for row in rows if row.split()[:1] == [str(PERSON)])

    for path in sorted(sorted((dataset / "images").glob("*.jpg")), key=persons, reverse=True)[:FRAMES]:
        shutil.copy(path, folder)
    return sorted(folder.glob("*.jpg"))


@pytest.fixture(scope="module")
def shadowed(weights, onnx_cache, tmp_path_factory, frames):
    """The app with a fault-switchable ONNX primary (the reference, torch, is not wrapped)."""
    switch = FaultSwitch(tmp_path_factory.mktemp("faults") / "faults.json")
    settings = Settings(_env_file=None, backend="onnx", weights=weights, imgsz=IMGSZ, threads=1,
                        preprocess_workers=1, warmup_iters=0, onnx_cache_dir=onnx_cache, shadow_backend="torch")
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(BACKENDS, "onnx", lambda options, _f=BACKENDS["onnx"]: FaultInjectingDetector(_f(options),
                                                                                                   switch.path))
        with real_shadow_app(settings) as env:
            yield env, switch


def send(env, frames, camera: str) -> None:
    for path in frames:
        r = env.client.post(f"/detect?camera_id={camera}", content=path.read_bytes(),
                            headers={"content-type": "image/jpeg"})
        assert r.status_code == 200, r.text
    assert state_of(env.app).shadow.get().drain(120)


def parity_says(weights, folder, onnx_cache, monkeypatch) -> float:
    """`campusguard parity`'s detection code: torch fp32 with a full decode as the reference, the
    service's configuration (onnx, reduced decode) as the candidate; F1 of its recall and precision."""
    monkeypatch.setenv("CAMPUSGUARD_ONNX_CACHE_DIR", str(onnx_cache))
    common = dict(weights=weights, images=folder, imgsz=IMGSZ, device="cpu", threads=1, shapes="", upscale=None)
    reference = detect_all(argparse.Namespace(backend="torch", decode="full", **common), "fp32")
    candidate = detect_all(argparse.Namespace(backend="onnx", decode="reduced", **common), "fp32")
    result = compare(reference, candidate)
    assert result.images == FRAMES and result.reference_boxes > 20
    return 2 * result.recall * result.box_precision / (result.recall + result.box_precision)


def test_agreement_equals_the_f1_of_campusguard_parity(shadowed, frames, weights, onnx_cache, monkeypatch):
    env, _ = shadowed
    send(env, frames[:4], "cam-a")
    send(env, frames[4:], "cam-b")
    status = env.client.get("/status").json()["shadow"]
    assert status["compared"] == FRAMES and status["dropped"] == {"busy": 0, "stale": 0, "failed": 0}
    assert status["reference"]["backend"] == "torch" and status["reference"]["precision"] == "fp32"
    overall = status["overall"]
    expected = parity_says(weights, frames[0].parent, onnx_cache, monkeypatch)
    assert overall["agreement"] == pytest.approx(expected, abs=0.01)
    assert overall["frames"] == FRAMES and set(status["cameras"]) == {"cam-a", "cam-b"}
    assert overall["agreement"] == pytest.approx(
        2 * overall["matched"] / (overall["primary_boxes"] + overall["reference_boxes"]), abs=1e-4)


def shadow_series(text: str, camera: str) -> dict[str, float]:
    """One scrape of a camera's agreement and window-frames series and the replica's alert floor
    (what Prometheus would store)."""
    wanted = {"campusguard_shadow_agreement", "campusguard_shadow_window_frames"}
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if (s.name in wanted and s.labels.get("camera_id") == camera) or s.name == "campusguard_shadow_alert_below"}


@pytest.fixture(scope="module")
def broken(shadowed, frames) -> list[dict[str, float]]:
    """ROUNDS rounds of the frames through a primary that dropped persons, on camera cam-broken,
    with its series scraped after each round (a minute apart, as far as the alert can tell)."""
    env, switch = shadowed
    switch.set(Faults(drop_class=PERSON))
    scrapes = []
    try:
        for _ in range(ROUNDS):
            send(env, frames, "cam-broken")
            scrapes.append(shadow_series(env.client.get("/metrics").text, "cam-broken"))
    finally:
        switch.set(Faults())
    return scrapes


@pytest.mark.slow  # real frames through the primary and the fp32 reference: 25-40 s
def test_a_primary_that_lost_a_class_drives_agreement_down(shadowed, broken):
    env, _ = shadowed
    cameras = env.client.get("/status").json()["shadow"]["cameras"]
    broken_camera = cameras["cam-broken"]
    assert broken_camera["frames"] == FRAMES * ROUNDS and broken_camera["agreement"] < 0.7
    assert broken_camera["recall"] < 0.6
    assert broken_camera["precision"] > 0.9  # what it still finds is right: only the class is gone
    worst = env.client.get("/shadow/worst?camera_id=cam-broken&limit=5").json()["frames"]
    assert worst and all(f["camera_id"] == "cam-broken" for f in worst)
    first = worst[0]
    assert not any(b["class_name"] == "person" for b in first["primary"])
    assert any(b["class_name"] == "person" for b in first["reference"])
    image = env.client.get(first["image_url"])
    assert image.status_code == 200 and image.content[:2] == b"\xff\xd8"


def test_the_broken_primarys_series_fire_the_alert_rule(broken, shadowed, tmp_path):
    """The scraped series, one a minute and then held, through `promtool test rules` on the shipped
    rule: quiet while fewer than 50 frames were compared (the agreement was already low), firing
    15 minutes after the window first held 50, with the camera's real agreement in the summary."""
    promtool = require_tool("promtool", "apt-get install prometheus, or `make system-deps`")
    frames_in_window = [s["campusguard_shadow_window_frames"] for s in broken]
    agreement = [s["campusguard_shadow_agreement"] for s in broken]
    assert frames_in_window == [FRAMES * (i + 1) for i in range(ROUNDS)] and max(agreement) < 0.7
    trusted = next(i for i, n in enumerate(frames_in_window) if n >= 50)  # the minute the floor is met
    assert trusted >= 2  # so that at 16 minutes the low agreement alone would have fired
    env, _ = shadowed
    model = {"model": state_of(env.app).models.default}  # the model the reference shadows labels its series
    text = env.client.get("/metrics").text
    assert {s.labels.get("model") for f in text_string_to_metric_families(text) for s in f.samples
            if s.name.startswith("campusguard_shadow_")} == {model["model"]}
    labels = ",".join(f'{k}="{v}"' for k, v in (REPLICA | model | {"camera_id": "cam-broken"}).items())

    floors = [s["campusguard_shadow_alert_below"] for s in broken]
    assert floors == [0.95] * ROUNDS  # an fp32 primary: the default floor

    def series(name: str, values: list[float], camera: bool = True) -> dict:
        shown = labels if camera else ",".join(f'{k}="{v}"' for k, v in (REPLICA | model).items())
        return {"series": f"{name}{{{shown}}}", "values": " ".join(map(repr, values)) + f" {values[-1]!r}x30"}

    rule = next(r for g in yaml.safe_load(ALERT_RULES.read_text())["groups"] for r in g["rules"] if r.get("alert") == ALERT)
    fired = {"exp_labels": REPLICA | model | {"camera_id": "cam-broken", "severity": "warning"},
             "exp_annotations": {"summary": f"detector-0: camera cam-broken agrees {agreement[-1]:.2f} with the shadow "
                                            f"reference of model {model['model']}",
                                 "description": rule["annotations"]["description"]}}
    case = {"rule_files": [str(ALERT_RULES)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m",
        "input_series": [series("campusguard_shadow_agreement", agreement),
                         series("campusguard_shadow_window_frames", frames_in_window),
                         series("campusguard_shadow_alert_below", floors, camera=False)],
        "alert_rule_test": [
            {"eval_time": "16m", "alertname": ALERT, "exp_alerts": []},  # low since minute 0, but too few frames
            {"eval_time": f"{trusted + 14}m", "alertname": ALERT, "exp_alerts": []},  # pending
            {"eval_time": f"{trusted + 16}m", "alertname": ALERT, "exp_alerts": [fired]}]}]}
    path = tmp_path / "broken-primary.yml"
    path.write_text(yaml.safe_dump(case, sort_keys=False))
    proc = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout
