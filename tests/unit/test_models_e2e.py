"""Issue 41, done when: two models serve at once in one process, the shared yolov8n and a custom
copy of it whose class names are changed in its metadata (``person`` -> ``student``, ``car`` ->
``vehicle``), per camera, per request and through ``/v1/vision/custom/{model}`` with the real
deepstack-python client; the rules of a camera on the custom model fire on ``student``.

One real server (uvicorn on a loopback port, its lifespan loading both models with torch at
320 px, no warm-up) for the whole module; Ultralytics' bus.jpg (four people and a bus) is the
frame."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from app.config import Settings
from app.core.errors import ConfigError
from app.inference.catalog import load_models
from tests.support.models import renamed_copy

CUSTOM = {0: "student", 2: "vehicle"}  # renamed classes of the custom copy (the other 78 keep COCO's names)
SITE = """
cameras:
  - id: plaza
    zones:
      - name: square
        polygon: [[0, 0], [1, 0], [1, 1], [0, 1]]
        rules: [{type: intrusion, classes: [person], cooldown_s: 0}]
  - id: gate
    model: campus
    zones:
      - name: door
        polygon: [[0, 0], [1, 0], [1, 1], [0, 1]]
        rules: [{type: intrusion, classes: [student], cooldown_s: 0}]
"""


@pytest.fixture(scope="module")
def models_dir(tmp_path_factory: pytest.TempPathFactory, weights: Path) -> Path:
    folder = tmp_path_factory.mktemp("models")
    (folder / "yolov8n.pt").write_bytes(weights.read_bytes())
    renamed_copy(weights, folder / "campus.pt", CUSTOM)  # its own classes, as a campus model declares them
    (folder / "models.yaml").write_text("models:\n  - {name: coco, weights: yolov8n.pt}\n"
                                        "  - {name: campus, weights: campus.pt, backend: torch}\n")
    return folder


def settings_for(folder: Path, tmp: Path, site: str = SITE) -> Settings:
    (tmp / "site.yaml").write_text(site)
    return Settings(_env_file=None, weights=folder / "yolov8n.pt", models_file=folder / "models.yaml",
                    backend="torch", precision="fp32", imgsz=320, warmup_iters=0, threads=2, preprocess_workers=1,
                    site_config=tmp / "site.yaml", ingest="off", events_db_url=f"sqlite:///{tmp}/events.db",
                    snapshot_dir=tmp / "snapshots", clips=False, data_dir=tmp, site_watch_s=0, fleet_interval_s=0)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def site_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("site")


@pytest.fixture(scope="module")
def server(models_dir: Path, site_dir: Path) -> Iterator[str]:
    """The real app with its lifespan (both models loaded) on a loopback socket; its base URL."""
    import uvicorn

    from app.main import create_app

    port = free_port()
    app = create_app(settings_for(models_dir, site_dir))
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="on", log_level="warning",
                                           access_log=False))
    thread = threading.Thread(target=server.run, name="models-e2e-server", daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while True:
        assert thread.is_alive() and time.monotonic() < deadline, "the server did not become ready"
        try:
            if server.started and httpx.get(f"{url}/health/ready").status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(30)


@pytest.fixture(scope="module")
def bus() -> bytes:
    from ultralytics.utils import ASSETS

    return (Path(ASSETS) / "bus.jpg").read_bytes()


def labels(reply: dict) -> set[str]:
    return {d["class_name"] for d in reply["detections"]}


def test_the_custom_copy_declares_its_own_classes(models_dir: Path):
    catalog = load_models(models_dir / "models.yaml", models_dir)
    assert catalog.get("campus").names[0] == "student" and catalog.get("campus").names[2] == "vehicle"
    assert catalog.get("coco").names[0] == "person" and len(catalog.get("campus").names) == 80


def test_both_models_are_listed_with_their_classes_and_cameras(server: str):
    reply = httpx.get(f"{server}/models").json()
    assert reply["default"] == "coco" and [m["name"] for m in reply["models"]] == ["coco", "campus"]
    coco, campus = reply["models"]
    assert coco["default"] and not campus["default"]
    assert coco["state"] == campus["state"] == "ready"
    assert coco["classes"][0] == "person" and campus["classes"][0] == "student" and campus["classes"][2] == "vehicle"
    assert campus["backend"] == "torch" and campus["precision"] == "fp32" and campus["shapes"] == ["320x320"]
    assert coco["cameras"] == ["plaza"] and campus["cameras"] == ["gate"]
    assert campus["weights"] == "campus.pt" and campus["weights_bytes"] > 1_000_000
    health = httpx.get(f"{server}/health").json()
    assert health["models"] == {"coco": "ready", "campus": "ready"} and health["model"] == "coco"
    info = next(line for line in httpx.get(f"{server}/metrics").text.splitlines()
                if line.startswith("campusguard_build_info{"))
    assert 'models="coco,campus"' in info and 'model="coco"' in info


def test_each_request_and_each_camera_gets_its_model(server: str, bus: bytes):
    def detect(**params: str) -> httpx.Response:
        return httpx.post(f"{server}/detect", params=params, files={"image": ("bus.jpg", bus, "image/jpeg")},
                          timeout=60)

    default = detect().json()
    assert default["model"] == "coco" and "person" in labels(default) and "student" not in labels(default)
    custom = detect(model="campus").json()
    assert custom["model"] == "campus" and "student" in labels(custom) and "person" not in labels(custom)
    # the same weights: the same boxes, only the names differ
    assert len(custom["detections"]) == len(default["detections"])

    gate = detect(camera_id="gate").json()  # the camera's model, without ?model=
    assert gate["model"] == "campus"
    fired = [e for e in gate["events"] if e["state"] == "started"]
    assert fired and {e["rule"] for e in fired} == {"intrusion"} and {e["zone"] for e in fired} == {"door"}
    plaza = detect(camera_id="plaza").json()
    assert plaza["model"] == "coco" and any(e["state"] == "started" for e in plaza["events"])

    mismatch = detect(camera_id="gate", model="coco")
    assert mismatch.status_code == 422 and mismatch.json()["error"] == "model_mismatch"
    assert "'campus'" in mismatch.json()["message"] and "'coco'" in mismatch.json()["message"]
    unknown = detect(model="yolo11x")
    assert unknown.status_code == 404 and unknown.json()["error"] == "unknown_model"
    assert detect(model="campus", classes="person").json()["error"] == "unknown_class"
    assert labels(detect(model="campus", classes="student").json()) == {"student"}


def test_deepstack_custom_routes(server: str, bus: bytes):
    listed = httpx.post(f"{server}/v1/vision/custom/list").json()
    assert listed["success"] is True and listed["models"] == ["coco", "campus"]
    custom = httpx.post(f"{server}/v1/vision/custom/campus", files={"image": ("bus.jpg", bus, "image/jpeg")},
                        timeout=60).json()
    assert custom["success"] is True and "student" in {p["label"] for p in custom["predictions"]}
    missing = httpx.post(f"{server}/v1/vision/custom/nope", files={"image": ("bus.jpg", bus, "image/jpeg")})
    assert missing.status_code == 404
    assert missing.json()["success"] is False and missing.json()["code"] == 404 and "nope" in missing.json()["error"]


def test_the_real_deepstack_python_client_calls_a_custom_model(server: str, bus: bytes):
    core = pytest.importorskip("deepstack.core", reason="deepstack-python (the dev extra) is not installed")
    port = int(server.rsplit(":", 1)[1])
    client = core.DeepstackObject(ip="127.0.0.1", port=port, custom_model="campus", min_confidence=0.4, timeout=60)
    predictions = client.detect(bus)
    assert "student" in core.get_objects(predictions) and "person" not in core.get_objects(predictions)
    assert all(p["confidence"] >= 0.4 for p in predictions)
    with pytest.raises(core.DeepstackException, match="404"):
        core.DeepstackObject(ip="127.0.0.1", port=port, custom_model="nope", timeout=60).detect(bus)


def test_a_camera_rule_on_a_class_its_model_lacks_stops_startup(models_dir: Path, tmp_path: Path):
    from app.wiring import check_site, load_catalog

    wrong = SITE.replace("classes: [student]", "classes: [person]")  # gate is on campus: no person there
    settings = settings_for(models_dir, tmp_path, wrong)
    catalog = load_catalog(settings)
    with pytest.raises(ConfigError) as caught:
        check_site(settings, catalog)
    assert "cameras[1].zones[0].rules[0].classes: ['person'] are not classes of model 'campus'" in caught.value.message
    unknown = settings_for(models_dir, tmp_path, SITE.replace("model: campus", "model: yolo11"))
    with pytest.raises(ConfigError, match=r"cameras\[1\]\.model: unknown model 'yolo11'"):
        check_site(unknown, catalog)


def test_a_reload_or_zone_edit_naming_a_class_the_cameras_model_lacks_changes_nothing(server: str, site_dir: Path,
                                                                                      bus: bytes):
    site = site_dir / "site.yaml"
    before = site.read_bytes()
    zone = {"name": "door", "polygon": [[0, 0], [1, 0], [1, 1], [0, 1]],
            "rules": [{"type": "intrusion", "classes": ["person"], "cooldown_s": 0}]}
    edit = httpx.put(f"{server}/admin/site/cameras/gate/zones/door", json=zone)
    assert edit.status_code == 422 and edit.json()["error"] == "invalid_site_config"
    assert "are not classes of model 'campus'" in edit.text
    assert site.read_bytes() == before  # refused before anything was written
    zone["rules"][0]["classes"] = ["student", "vehicle"]
    assert httpx.put(f"{server}/admin/site/cameras/gate/zones/door", json=zone).status_code == 200
    site.write_text(SITE.replace("classes: [student]", "classes: [person]"))  # edited by hand
    reload = httpx.post(f"{server}/admin/reload")
    assert reload.status_code == 422 and "cameras[1].zones[0].rules[0].classes" in reload.text
    gate = httpx.post(f"{server}/detect", params={"camera_id": "gate"}, timeout=60,
                      files={"image": ("bus.jpg", bus, "image/jpeg")}).json()
    # the running config (student, vehicle) stays in force: its zone, reset by the edit, fires on students again
    assert gate["model"] == "campus" and [e["state"] for e in gate["events"]] == ["started"]


def test_the_metrics_carry_each_model_s_name(server: str, bus: bytes):
    """Issue 41 part 5: latency, batch size, queue, readiness and the pipeline's counts per model;
    what was posted to each model shows under its own label and nowhere else."""
    from prometheus_client.parser import text_string_to_metric_families

    def scrape() -> dict[tuple[str, tuple], float]:
        text = httpx.get(f"{server}/metrics").text
        return {(s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(text) for s in family.samples}

    def per_model(figures: dict, name: str, **labels: str) -> dict[str, float]:
        return {dict(key)["model"]: value for (sample, key), value in figures.items()
                if sample == name and "model" in dict(key) and all(dict(key).get(k) == v for k, v in labels.items())}

    before = scrape()
    posted = {"coco": 3, "campus": 2}
    for model, n in posted.items():
        for _ in range(n):
            r = httpx.post(f"{server}/detect", params={"model": model}, timeout=60,
                           files={"image": ("bus.jpg", bus, "image/jpeg")})
            assert r.status_code == 200 and r.json()["model"] == model
    after = scrape()

    def grew(name: str, **labels: str) -> dict[str, float]:
        old = per_model(before, name, **labels)
        return {m: v - old.get(m, 0.0) for m, v in per_model(after, name, **labels).items()}

    assert grew("campusguard_batch_size_sum") == posted  # images per model, batched on its own engine
    assert grew("campusguard_images_total") == posted
    assert grew("campusguard_stage_duration_seconds_count", stage="inference") == posted
    assert per_model(after, "campusguard_model_ready") == {"coco": 1.0, "campus": 1.0}
    assert after[("campusguard_ready", ())] == 1.0  # the replica's readiness: the default model's
    assert set(per_model(after, "campusguard_queue_capacity")) == set(per_model(after, "campusguard_queue_depth")) \
        == {"coco", "campus"}
    assert per_model(after, "campusguard_model_weights_bytes")["campus"] > 1_000_000
    # the shadow lane (off here) still exports its overall series, labelled with the model it shadows: the default
    assert set(per_model(after, "campusguard_shadow_agreement")) == {"coco"}
