"""Model files for the models tests: an ONNX file that declares class names in its metadata the
way an Ultralytics export does (what the models folder's checks read), without a real network."""

from __future__ import annotations

from pathlib import Path


def write_onnx_names(path: Path, names: dict[int, str]) -> Path:
    """A one-node ONNX model (Identity) whose ``names`` metadata is ``names``: classes readable,
    nothing to run (the tests that use it serve fake engines)."""
    import onnx
    from onnx import TensorProto, helper

    tensor = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    output = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "names", [tensor], [output])
    model = helper.make_model(graph)
    model.metadata_props.add(key="names", value=repr(names))
    onnx.save(model, str(path))
    return path


def renamed_copy(weights: Path, target: Path, renamed: dict[int, str]) -> Path:
    """An Ultralytics checkpoint with some class names changed in its metadata, its weights
    untouched (a custom model as the models folder sees it)."""
    import torch

    checkpoint = torch.load(weights, map_location="cpu", weights_only=False)
    checkpoint["model"].names = {**dict(checkpoint["model"].names), **renamed}
    torch.save(checkpoint, target)
    return target
