"""Issue 41: the shadow reference follows a swap of the default model. Without
CAMPUSGUARD_SHADOW_WEIGHTS the reference is the default model's own weights in fp32, so after
``PUT /admin/models/{default}`` it is rebuilt from the new weights (a new lane, its agreement
book restarted, the old lane stopped, audited); with CAMPUSGUARD_SHADOW_WEIGHTS it stays, its idle
check following the engine now behind the name (never the old one, drained and freed). The
real app in process (its lifespan loads yolov8n with torch at 320 px and a torch fp32 reference)."""

from __future__ import annotations

from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.api.state import state_of
from app.config import Settings
from app.inference.shadow.lane import ShadowLane
from app.main import create_app
from tests.support.inprocess import wait_until_ready
from tests.support.models import renamed_copy

# one camera on the default model, whose rule (person) every swap below must keep serving
SITE = ("cameras: [{id: plaza, zones: [{name: all, polygon: [[0, 0], [1, 0], [1, 1], [0, 1]], "
        "rules: [{type: intrusion, classes: [person]}]}]}]\n")


@pytest.fixture()
def folder(tmp_path: Path, weights: Path) -> Path:
    models = tmp_path / "models"
    models.mkdir()
    (models / "yolov8n.pt").write_bytes(weights.read_bytes())
    renamed_copy(weights, models / "campus.pt", {2: "vehicle"})  # the site's rule (person) still holds
    return models


def settings_for(folder: Path, tmp: Path, **extra) -> Settings:
    (tmp / "site.yaml").write_text(SITE)
    return Settings(_env_file=None, weights=folder / "yolov8n.pt", backend="torch", precision="fp32", imgsz=320,
                    warmup_iters=0, threads=2, preprocess_workers=1, ingest="off", data_dir=tmp,
                    site_config=tmp / "site.yaml", events_db_url=f"sqlite:///{tmp}/events.db",
                    snapshot_dir=tmp / "snapshots", clips=False, site_watch_s=0, fleet_interval_s=0,
                    shadow_backend="torch", shadow_device="cpu", shadow_sample=1.0, shadow_min_interval_s=0.0,
                    **extra)


@pytest.fixture(scope="module")
def bus() -> bytes:
    from ultralytics.utils import ASSETS

    return (Path(ASSETS) / "bus.jpg").read_bytes()


def compare_one(client: TestClient, bus: bytes) -> ShadowLane:
    """One frame of camera plaza through the primary and, sampled at 1.0, the reference."""
    r = client.post("/detect", params={"camera_id": "plaza"}, files={"image": ("bus.jpg", bus, "image/jpeg")})
    assert r.status_code == 200, r.text
    lane = state_of(client.app).shadow.get()
    assert isinstance(lane, ShadowLane) and lane.drain(60)
    return lane


def test_a_swap_of_the_default_rebuilds_the_reference_from_the_new_weights(folder: Path, tmp_path: Path,
                                                                           bus: bytes):
    with TestClient(create_app(settings_for(folder, tmp_path))) as client:
        wait_until_ready(client, 180)
        old = compare_one(client, bus)
        assert old.describe["weights"] == "yolov8n.pt" and old.status()["compared"] == 1

        swap = client.put("/admin/models/yolov8n", json={"weights": "campus.pt"})
        assert swap.status_code == 200, swap.text

        new = state_of(client.app).shadow.get()
        assert isinstance(new, ShadowLane) and new is not old
        assert new.describe["weights"] == "campus.pt" and new.status()["compared"] == 0  # the book restarted
        assert old._thread is not None and not old._thread.is_alive()  # the old lane stopped
        compare_one(client, bus)
        status = client.get("/status").json()["shadow"]
        assert status["reference"]["weights"] == "campus.pt" and status["compared"] == 1
        assert status["overall"]["agreement"] == 1.0  # the new weights against their own fp32: no drift
        assert 'model="yolov8n"' in next(line for line in client.get("/metrics").text.splitlines()
                                         if line.startswith("campusguard_shadow_window_frames{"))
        audit = client.get("/audit", params={"action": "shadow.reference"}).json()["items"]
        assert [(a["actor"], a["target"], a["before"], a["after"], a["outcome"]) for a in audit] == [
            ("system:model.swap", "yolov8n", "yolov8n.pt", "campus.pt", "ok")]


def test_an_explicit_shadow_weights_reference_stays_through_a_swap(folder: Path, tmp_path: Path, bus: bytes):
    settings = settings_for(folder, tmp_path, shadow_weights=folder / "yolov8n.pt")
    with TestClient(create_app(settings)) as client:
        wait_until_ready(client, 180)
        old = compare_one(client, bus)
        models = state_of(client.app).models
        before = models.engine("yolov8n")
        assert client.put("/admin/models/yolov8n", json={"weights": "campus.pt"}).status_code == 200
        assert state_of(client.app).shadow.get() is old and old.describe["weights"] == "yolov8n.pt"
        assert state_of(client.app).switch.get().wait_drained("yolov8n", 30)
        serving = models.engine("yolov8n")
        assert serving is not None and serving is not before and before is not None and before.idle
        # the kept lane waits for the engine serving now, not the old one (drained, freed, always idle)
        serving._admitted += 1  # a frame admitted to the new engine: it is busy
        try:
            assert not old.idle()
        finally:
            serving._admitted -= 1
        assert old.idle()
        assert compare_one(client, bus).status()["compared"] == 2  # the same book, still comparing
        assert client.get("/audit", params={"action": "shadow.reference"}).json()["items"] == []
