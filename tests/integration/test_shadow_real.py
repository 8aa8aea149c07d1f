"""The shadow lane with real models (in-process, no socket): an ONNX Runtime primary at 320
with the service's reduced JPEG decode against a torch fp32 reference on the fully decoded
originals, on coco-val128 frames.

1. The agreement the lane reports equals the F1 of what `campusguard parity` (its own
   detection code and ``compare``) says about the same frames, within 0.01.
2. A primary that lost a class (a fault injected through the backend registry, as the
   reliability tests do) drives its camera's agreement down, and the worst frames show the
   reference's boxes it missed.
"""

from __future__ import annotations

import argparse
import shutil

import pytest

from app.commands.parity import detect_all
from app.config import Settings
from app.inference.backends.registry import BACKENDS
from app.tooling.bench.parity import compare
from tests.support.faults import FaultInjectingDetector, Faults, FaultSwitch
from tests.support.shadow import real_shadow_app

IMGSZ = 320
FRAMES = 8
PERSON = 0


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
    assert env.app.state.shadow.drain(120)


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


def test_a_primary_that_lost_a_class_drives_agreement_down(shadowed, frames):
    env, switch = shadowed
    switch.set(Faults(drop_class=PERSON))
    try:
        send(env, frames, "cam-broken")
    finally:
        switch.set(Faults())
    cameras = env.client.get("/status").json()["shadow"]["cameras"]
    broken = cameras["cam-broken"]
    assert broken["frames"] == FRAMES and broken["agreement"] < 0.7 and broken["recall"] < 0.6
    assert broken["precision"] > 0.9  # what it still finds is right: only the class is gone
    worst = env.client.get("/shadow/worst?camera_id=cam-broken&limit=5").json()["frames"]
    assert worst and all(f["camera_id"] == "cam-broken" for f in worst)
    first = worst[0]
    assert not any(b["class_name"] == "person" for b in first["primary"])
    assert any(b["class_name"] == "person" for b in first["reference"])
    image = env.client.get(first["image_url"])
    assert image.status_code == 200 and image.content[:2] == b"\xff\xd8"
