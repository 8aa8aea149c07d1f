"""The models file (issue 41): named models, weights confined to the models folder, class
names read from the model itself, every problem reported at once with its field."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from app.inference.catalog import (
    ModelsConfigError,
    class_names,
    load_models,
    onnx_class_names,
    parse_models,
    parse_names,
)

COCO3 = {0: "person", 1: "bicycle", 2: "car"}


def fake_reader(path: Path) -> dict[int, str]:
    if path.read_bytes() == b"broken":
        raise ValueError("not an ONNX model (DecodeError)")
    return COCO3


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    models = tmp_path / "models"
    models.mkdir()
    for name in ("a.pt", "b.onnx"):
        (models / name).write_bytes(b"weights")
    (models / "bad.onnx").write_bytes(b"broken")
    return models


def parse(text: str, folder: Path):
    return parse_models(text.encode(), "models.yaml", folder, fake_reader)


def test_a_valid_file_names_its_models_in_order(folder: Path):
    catalog = parse("models:\n  - {name: coco, weights: a.pt}\n  - {name: campus, weights: b.onnx, backend: onnx}\n",
                    folder)
    assert catalog.names() == ["coco", "campus"]
    assert catalog.default.name == "coco" and catalog.default.path == (folder / "a.pt").resolve()
    assert catalog.get("campus").spec.backend == "onnx" and catalog.get("campus").names == COCO3
    assert catalog.get("nope") is None


def test_every_problem_is_reported_at_once_with_its_field(folder: Path):
    with pytest.raises(ModelsConfigError) as caught:
        parse("models:\n"
              "  - {name: coco, weights: a.pt}\n"
              "  - {name: coco, weights: b.onnx}\n"            # duplicate name
              "  - {name: up, weights: ../secret.pt}\n"         # outside the folder
              "  - {name: gone, weights: missing.pt}\n"         # no such file
              "  - {name: bad, weights: bad.onnx}\n", folder)   # not a model
    errors = caught.value.errors
    assert len(errors) == 4, errors
    assert errors[0].startswith("models[1].name: 'coco' is already the name of models[0]")
    assert errors[1].startswith("models[2].weights: must be inside the models folder")
    assert errors[2].startswith("models[3].weights: no such file")
    assert errors[3].startswith("models[4].weights: cannot read the model's classes")
    assert caught.value.code == "invalid_models_config"


@pytest.mark.parametrize("text, field", [
    ("models:\n  - {name: coco, weights: a.pt, colour: red}\n", "models[0].colour"),          # unknown key
    ("models:\n  - {name: 'bad name', weights: a.pt}\n", "models[0].name"),
    ("models:\n  - {name: coco, weights: a.txt}\n", "models[0].weights"),
    ("models:\n  - {name: coco, weights: a.pt, backend: tensorrt}\n", "models[0].backend"),
    ("models: []\n", "models"),
    ("modles:\n  - {name: coco, weights: a.pt}\n", "modles"),
])
def test_schema_errors_name_the_field(folder: Path, text: str, field: str):
    with pytest.raises(ModelsConfigError) as caught:
        parse(text, folder)
    assert any(e.startswith(field) for e in caught.value.errors), caught.value.errors


@pytest.mark.parametrize("data", [b"", b"\xff\xfe\x00garbage", b"models: [unclosed", b"- just\n- a list\n",
                                  b"models:\n  - {name: x, weights: \"a\\0.pt\"}\n"])
def test_empty_garbage_and_hostile_files_are_refused(folder: Path, data: bytes):
    with pytest.raises(ModelsConfigError):
        parse_models(data, "models.yaml", folder, fake_reader)


def test_an_absolute_path_or_a_link_out_of_the_folder_is_refused(folder: Path, tmp_path: Path):
    outside = tmp_path / "outside.pt"
    outside.write_bytes(b"weights")
    os.symlink(outside, folder / "link.pt")
    for weights in (str(outside), "link.pt", str(folder / ".." / "outside.pt")):
        with pytest.raises(ModelsConfigError, match="inside the models folder"):
            parse(f"models:\n  - {{name: m, weights: '{weights}'}}\n", folder)
    # an absolute path inside the folder is fine
    assert parse(f"models:\n  - {{name: m, weights: '{folder / 'a.pt'}'}}\n", folder).default.name == "m"


def test_oversized_and_odd_files_are_refused_before_reading(folder: Path, tmp_path: Path):
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * (300 * 1024))
    with pytest.raises(ModelsConfigError, match="at most"):
        load_models(big, folder, fake_reader)
    with pytest.raises(ModelsConfigError, match="not a regular file"):
        load_models(tmp_path, folder, fake_reader)
    with pytest.raises(ModelsConfigError, match="cannot read it"):
        load_models(tmp_path / "none.yaml", folder, fake_reader)


def test_class_names_must_be_well_formed():
    assert parse_names("{0: 'student', 1: 'vehicle'}") == {0: "student", 1: "vehicle"}
    assert parse_names(["a", "b"]) == {0: "a", 1: "b"}
    for bad in ("__import__('os')", "{}", "{0: 'a', 2: 'c'}", "{0: 'a\\x00'}", "{-1: 'a'}", "{0: ''}", 42):
        with pytest.raises(ValueError):
            parse_names(bad)


def test_onnx_class_names_come_from_the_export_metadata(tmp_path: Path):
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = helper.make_model(graph)
    entry = model.metadata_props.add()
    entry.key, entry.value = "names", "{0: 'student', 1: 'vehicle'}"
    path = tmp_path / "custom.onnx"
    onnx.save(model, str(path))
    assert onnx_class_names(path) == {0: "student", 1: "vehicle"}
    del model.metadata_props[:]
    onnx.save(model, str(path))
    with pytest.raises(ValueError, match="no `names` metadata"):
        onnx_class_names(path)
    path.write_bytes(b"\x00garbage")
    with pytest.raises(ValueError, match="not an ONNX model"):
        onnx_class_names(path)


def test_the_real_checkpoint_declares_coco_classes(weights: Path, tmp_path: Path):
    """The shared yolov8n.pt, read the way the service reads it: 80 COCO classes."""
    folder = tmp_path / "models"
    folder.mkdir()
    shutil.copy(weights, folder / "yolov8n.pt")
    (tmp_path / "models.yaml").write_text("models:\n  - {name: coco, weights: yolov8n.pt}\n")
    catalog = load_models(tmp_path / "models.yaml", folder)
    names = catalog.default.names
    assert len(names) == 80 and names[0] == "person" and names[79] == "toothbrush"
    assert class_names(folder / "yolov8n.pt") == names
