"""Several models at once (issue 41): the model set, the router (camera's model, ``?model=``,
404 ``unknown_model``, 422 ``model_mismatch``), the site file checked against the models'
classes, the models file from the settings, and the detection routes over two fake engines."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.api.access import Gate
from app.api.errors import install_error_handlers
from app.api.routes import deepstack, deepstack_custom, detect, models
from app.config import Settings
from app.core.errors import ConfigError
from app.core.roles import Keyring
from app.core.slot import Slot
from app.flow.models import ModelRouter
from app.inference.catalog import ModelsConfigError
from app.inference.modelset import ModelMismatch, ModelSet, ServedModel, UnknownModel
from app.rules.site.loader import SiteConfigError, parse_site_text
from app.rules.site.models import camera_models, model_errors
from app.wiring import build_model_set, check_site_models, load_catalog, model_settings
from tests.support.fakes import FakeDetector, make_engine
from tests.support.inprocess import png
from tests.support.state import install_state

COCO = {0: "person", 1: "car"}
CAMPUS = {0: "student", 1: "vehicle"}


def two_models() -> ModelSet:
    return ModelSet([ServedModel("coco", Path("coco.pt"), classes=COCO),
                     ServedModel("campus", Path("campus.pt"), classes=CAMPUS)])


def test_the_set_keeps_file_order_and_refuses_duplicates_and_unknown_names():
    models = two_models()
    assert models.default == "coco" and models.names() == ["coco", "campus"]
    assert models.get("campus").class_names() == CAMPUS and models.find("nope") is None
    with pytest.raises(UnknownModel) as caught:
        models.get("nope")
    assert caught.value.status == 404 and caught.value.code == "unknown_model"
    assert "coco, campus" in caught.value.message
    with pytest.raises(ValueError, match="named twice"):
        ModelSet([ServedModel("a", Path("a.pt")), ServedModel("a", Path("b.pt"))])
    with pytest.raises(ValueError, match="at least one"):
        ModelSet([])


def test_an_entry_is_replaced_whole_and_its_engine_arrives_in_its_slot():
    models = two_models()
    entry = models.get("campus")
    assert entry.state == "loading" and entry.engine is None and models.engines() == []
    engine = make_engine(FakeDetector(names=CAMPUS))
    try:
        entry.slot.put(engine)
        assert models.engine("campus") is engine and entry.state == "ready"
        newer = ServedModel("campus", Path("campus-v2.pt"), classes={0: "student"}, slot=entry.slot)
        assert models.replace(newer) is entry and models.get("campus") is newer
        assert models.engine("campus") is engine  # the slot, where its traffic goes, carried over
        engine.begin_drain()
        assert newer.state == "unavailable"
    finally:
        engine.stop()
    unknown = ModelSet([ServedModel("m", Path("m.pt"))])
    assert unknown.get("m").class_names() is None  # no models file: known once the model is loaded


def test_the_router_picks_the_cameras_model_or_the_one_asked_for():
    router = ModelRouter(two_models(), {"gate-1": "campus", "plaza": "coco"})
    assert router.choose(None, None) == "coco" and router.choose(None, "gate-1") == "campus"
    assert router.choose("", "plaza") == "coco" and router.choose(None, "not-in-site") == "coco"
    assert router.choose("campus", "gate-1") == "campus" and router.choose("campus", None) == "campus"
    assert router.choose("campus", "not-in-site") == "campus"
    with pytest.raises(ModelMismatch) as caught:
        router.choose("coco", "gate-1")
    assert caught.value.status == 422 and caught.value.code == "model_mismatch"
    assert "'campus'" in caught.value.message and "'coco'" in caught.value.message
    with pytest.raises(UnknownModel):
        router.choose("yolo11", "gate-1")  # unknown is 404 before any camera check
    assert router.cameras_of("campus") == ["gate-1"]
    router.assign({"plaza": "campus"})
    assert router.model_of("gate-1") == "coco" and router.model_of("plaza") == "campus"


SITE = """
cameras:
  - id: gate-1
    model: campus
    zones:
      - name: door
        polygon: [[0, 0], [1, 0], [1, 1]]
        rules: [{type: intrusion, classes: [student]}]
  - id: plaza
    zones:
      - name: lawn
        polygon: [[0, 0], [1, 0], [1, 1]]
        rules: [{type: crowd, min_count: 2}, {type: intrusion, classes: [car, student]}]
"""


def test_rules_are_checked_against_the_classes_of_their_cameras_model():
    config = parse_site_text(SITE)
    assert camera_models(config, "coco") == {"gate-1": "campus", "plaza": "coco"}
    classes = {"coco": COCO, "campus": CAMPUS}
    assert model_errors(config, classes, "coco") == [
        "cameras[1].zones[0].rules[1].classes: ['student'] are not classes of model 'coco' (camera plaza), which "
        "detects car, person"]
    errors = model_errors(config, {"coco": COCO}, "coco")
    assert errors[0].startswith("cameras[0].model: unknown model 'campus' (camera gate-1)")
    assert model_errors(config, {"coco": None, "campus": CAMPUS}, "coco") == []  # classes not known yet
    with pytest.raises(SiteConfigError) as caught:
        check_site_models(config, "site.yaml", two_models())
    assert caught.value.code == "invalid_site_config" and len(caught.value.errors) == 1


def test_a_camera_model_name_is_checked_by_the_schema():
    with pytest.raises(SiteConfigError, match=r"cameras\[0\]\.model"):
        parse_site_text("cameras:\n  - id: a\n    model: 'bad name'\n")


def test_without_a_models_file_one_model_is_named_after_the_weights(tmp_path: Path):
    settings = Settings(_env_file=None, weights=tmp_path / "campus-v3.pt")
    assert load_catalog(settings) is None and settings.resolved_models_dir == tmp_path
    slot = Slot(None)
    models = build_model_set(settings, None, slot)
    assert models.names() == ["campus-v3"] and models.get("campus-v3").slot is slot
    named = build_model_set(Settings(_env_file=None, weights=tmp_path / "x.pt", model_name="gate"), None, slot)
    assert named.names() == ["gate"]


def test_models_file_errors_name_the_setting_and_the_field(tmp_path: Path, weights: Path):
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copy(weights, folder / "yolov8n.pt")
    (tmp_path / "outside.pt").write_bytes(b"x")
    models_file = tmp_path / "models.yaml"
    models_file.write_text("models:\n  - {name: coco, weights: yolov8n.pt}\n  - {name: up, weights: ../outside.pt}\n"
                           "  - {name: coco, weights: yolov8n.pt}\n")
    settings = Settings(_env_file=None, weights=folder / "yolov8n.pt", models_file=models_file)
    with pytest.raises(ModelsConfigError) as caught:
        load_catalog(settings)
    message = caught.value.message
    assert "CAMPUSGUARD_MODELS_FILE=" in message and "models[1].weights: must be inside the models folder" in message
    assert "models[2].name: 'coco' is already the name of models[0]" in message
    with pytest.raises(ConfigError, match="CAMPUSGUARD_MODELS_DIR"):
        load_catalog(settings.model_copy(update={"models_dir": tmp_path / "none"}))
    models_file.write_text("models:\n  - {name: coco, weights: yolov8n.pt}\n"
                           "  - {name: fast, weights: yolov8n.pt, backend: onnx, precision: fp16, shapes: 384x640}\n")
    catalog = load_catalog(settings)
    assert catalog is not None and catalog.names() == ["coco", "fast"]
    fast = model_settings(settings, catalog.get("fast"))
    assert (fast.backend, fast.precision, fast.shapes, fast.model_name) == ("onnx", "fp16", "384x640", "fast")
    coco = model_settings(settings, catalog.default)
    assert (coco.backend, coco.precision, coco.shapes) == (settings.backend, settings.precision, settings.shapes)
    models = build_model_set(settings, catalog, Slot(None))
    assert models.get("fast").class_names()[0] == "person" and models.get("fast").backend == "onnx"


def app_over(coco, campus, keys: tuple[str, ...] = ()) -> TestClient:
    """A bare app with the detection, DeepStack and models routes over two engines, ``coco``
    (the default) and ``campus`` (other classes), the site's ``gate-1`` on ``campus``."""
    app = FastAPI()
    install_error_handlers(app)
    for module in (detect, deepstack, deepstack_custom, models):
        app.include_router(module.router)
    router = ModelRouter(ModelSet([ServedModel("coco", Path("coco.pt"), classes=COCO),
                                   ServedModel("campus", Path("campus.pt"), classes=CAMPUS, slot=Slot(campus))]),
                         {"gate-1": "campus", "plaza": "coco"})
    install_state(app, engine=coco, models=router, gate=Gate.of(Keyring.parse(keys)) if keys else None)
    return TestClient(app, raise_server_exceptions=False)


@pytest.fixture()
def two_engines():
    coco = make_engine(FakeDetector(names=COCO))
    campus = make_engine(FakeDetector(names=CAMPUS))
    coco.pipeline.detector.model_name, campus.pipeline.detector.model_name = "coco", "campus"
    try:
        yield app_over(coco, campus), coco, campus
    finally:
        for engine in (coco, campus):
            engine.begin_drain()
            engine.stop()


def test_each_request_goes_to_its_model_and_its_cameras(two_engines):
    client, coco, campus = two_engines
    post = lambda **params: client.post("/detect", params=params, content=png(), headers={"Content-Type": "image/png"})  # noqa: E731
    first = post()
    assert first.status_code == 200 and first.json()["model"] == "coco"
    assert first.json()["detections"][0]["class_name"] == "person"
    custom = post(model="campus")
    assert custom.json()["model"] == "campus" and custom.json()["detections"][0]["class_name"] == "student"
    assert post(camera_id="gate-1").json()["model"] == "campus"  # the camera's model, without ?model=
    assert post(camera_id="plaza", classes="car").json()["model"] == "coco"
    mismatch = post(camera_id="gate-1", model="coco")
    assert mismatch.status_code == 422 and mismatch.json()["error"] == "model_mismatch"
    assert "'campus'" in mismatch.json()["message"] and "'coco'" in mismatch.json()["message"]
    unknown = post(model="yolo11")
    assert unknown.status_code == 404 and unknown.json()["error"] == "unknown_model"
    wrong_class = post(model="campus", classes="person")
    assert wrong_class.status_code == 422 and wrong_class.json()["error"] == "unknown_class"
    assert "model 'campus'" in wrong_class.json()["message"]
    files = [("images", ("a.png", png(), "image/png"))] * 2
    batch = client.post("/detect/batch", params={"model": "campus"}, files=files).json()
    assert [item["result"]["model"] for item in batch["results"]] == ["campus", "campus"]
    assert sum(campus.pipeline.detector.calls) == 4 and sum(coco.pipeline.detector.calls) == 2  # each its own


def test_a_model_that_is_still_loading_is_a_503_of_its_own(two_engines):
    client, coco, campus = two_engines
    campus.begin_drain()
    r = client.post("/detect", params={"model": "campus"}, content=png(), headers={"Content-Type": "image/png"})
    assert r.status_code == 503
    ok = client.post("/detect", content=png(), headers={"Content-Type": "image/png"})
    assert ok.status_code == 200  # one model unavailable does not stop the other


def test_the_deepstack_custom_routes_use_the_named_model_and_answer_in_deepstacks_shape(two_engines):
    client, coco, campus = two_engines
    image = {"image": ("a.png", png(), "image/png")}
    listed = client.post("/v1/vision/custom/list").json()
    assert listed["success"] is True and listed["models"] == ["coco", "campus"] and listed["count"] == 2
    custom = client.post("/v1/vision/custom/campus", files=image, data={"min_confidence": "0.5"}).json()
    assert custom["success"] is True and [p["label"] for p in custom["predictions"]] == ["student"]
    assert [p["label"] for p in client.post("/v1/vision/custom/coco", files=image).json()["predictions"]] == ["person"]
    missing = client.post("/v1/vision/custom/nope", files=image)
    assert missing.status_code == 404 and missing.json()["success"] is False and missing.json()["code"] == 404
    assert "unknown model 'nope'" in missing.json()["error"]
    bad = client.post("/v1/vision/custom/campus", files=image, data={"min_confidence": "2"})
    assert bad.status_code == 400 and bad.json()["success"] is False  # the detection route's errors
    campus.begin_drain()
    assert client.post("/v1/vision/custom/campus", files=image).status_code == 503


def test_the_custom_routes_judge_the_key_first_and_name_no_model_to_a_caller_without_one():
    coco, campus = make_engine(FakeDetector(names=COCO)), make_engine(FakeDetector(names=CAMPUS))
    try:
        client = app_over(coco, campus, keys=("camera:cam-key-0123456789", "viewer:view-key-0123456789"))
        image = {"image": ("a.png", png(), "image/png")}
        for model in ("nope", "campus"):  # the same refusal whether the model exists or not
            r = client.post(f"/v1/vision/custom/{model}", files=image)
            assert r.status_code == 401 and r.json()["success"] is False
            wrong = client.post(f"/v1/vision/custom/{model}", files=image, data={"api_key": "wrong"})
            assert wrong.status_code == 403
        viewer = client.post("/v1/vision/custom/campus", files=image, headers={"X-API-Key": "view-key-0123456789"})
        assert viewer.status_code == 403  # detection needs the detect permission
        by_header = client.post("/v1/vision/custom/nope", files=image, headers={"X-API-Key": "cam-key-0123456789"})
        assert by_header.status_code == 404
        by_form = client.post("/v1/vision/custom/campus", files=image, data={"api_key": "cam-key-0123456789"})
        assert by_form.status_code == 200 and by_form.json()["predictions"][0]["label"] == "student"
        assert client.post("/v1/vision/custom/list").status_code == 401
        listed = client.post("/v1/vision/custom/list", data={"api_key": "cam-key-0123456789"},
                             files={"x": ("x", b"", "text/plain")})
        assert listed.status_code == 200 and listed.json()["models"] == ["coco", "campus"]
        assert client.get("/models").status_code == 401
        assert [m["name"] for m in client.get("/models", headers={"X-API-Key": "view-key-0123456789"}).json()[
            "models"]] == ["coco", "campus"]
    finally:
        for engine in (coco, campus):
            engine.begin_drain()
            engine.stop()


def test_the_models_document_says_what_each_model_is_doing(two_engines):
    client, coco, campus = two_engines
    client.post("/detect", params={"model": "campus"}, content=png(), headers={"Content-Type": "image/png"})
    reply = client.get("/models").json()
    assert reply["default"] == "coco"
    first, second = reply["models"]
    assert first["default"] and first["classes"] == ["person", "car"] and first["cameras"] == ["plaza"]
    assert second["classes"] == ["student", "vehicle"] and second["cameras"] == ["gate-1"]
    assert second["state"] == "ready" and second["backend"] == "fake" and second["images"] == 1
    assert second["images_per_s"] is not None and second["images_per_s"] > 0 and second["queue_depth"] == 0
    assert second["weights"] == "campus.pt" and second["weights_bytes"] is None  # no such file here
    campus.begin_drain()
    assert client.get("/models").json()["models"][1]["state"] == "unavailable"


def test_serve_stops_with_exit_2_naming_the_models_files_field(tmp_path: Path, monkeypatch, capsys):
    from app.cli import main

    (tmp_path / "models").mkdir()
    (tmp_path / "secret.pt").write_bytes(b"not for the service")
    (tmp_path / "models.yaml").write_text("models:\n  - {name: coco, weights: ../secret.pt}\n")
    monkeypatch.chdir(tmp_path)  # no .env of the checkout
    monkeypatch.setenv("CAMPUSGUARD_WEIGHTS", str(tmp_path / "models" / "yolov8n.pt"))
    monkeypatch.setenv("CAMPUSGUARD_MODELS_FILE", str(tmp_path / "models.yaml"))
    assert main(["serve"]) == 2
    err = capsys.readouterr().err
    assert "CAMPUSGUARD_MODELS_FILE=" in err and "models[0].weights: must be inside the models folder" in err


def test_a_runtime_a_model_cannot_run_is_a_startup_error_naming_the_model(tmp_path: Path, weights: Path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    from app.wiring import check_models

    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copy(weights, folder / "yolov8n.pt")
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph)
    entry = model.metadata_props.add()
    entry.key, entry.value = "names", "{0: 'student', 1: 'vehicle'}"
    onnx.save(model, str(folder / "campus.onnx"))
    models_file = tmp_path / "models.yaml"
    models_file.write_text("models:\n  - {name: coco, weights: yolov8n.pt}\n"
                           "  - {name: campus, weights: campus.onnx, backend: torch}\n")
    settings = Settings(_env_file=None, weights=folder / "yolov8n.pt", models_file=models_file, backend="torch",
                        precision="fp32")
    catalog = load_catalog(settings)
    assert catalog is not None and catalog.get("campus").names == CAMPUS
    with pytest.raises(ConfigError, match=r"CAMPUSGUARD_MODELS_FILE: models\[1\] \(campus\): .*cannot load an .onnx"):
        check_models(settings, catalog)
    models_file.write_text(models_file.read_text().replace("backend: torch", "backend: onnx"))
    choices = check_models(settings, load_catalog(settings))
    assert choices["campus"].backend == "onnx" and "coco" not in choices  # the default is resolved by serve itself
