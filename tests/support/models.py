"""Model files for the models tests: an ONNX file that declares class names in its metadata the
way an Ultralytics export does (what the models folder's checks read), without a real network;
custom copies of the real model; and a rollout's candidates (the real model exported to ONNX,
exported again, and a drifted copy)."""

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


def drifted(source: Path, target: Path, factor: float = 0.5) -> Path:
    """``source`` with its output's class-score rows multiplied by ``factor``: YOLOv8's output is
    [batch, 4 + classes, anchors]; a Mul by a [1, 4 + classes, 1] constant (1.0 for the 4 box rows)
    inserted before the graph's output. Metadata (names, imgsz) kept."""
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    model = onnx.load(str(source))
    graph = model.graph
    output = graph.output[0]
    rows = output.type.tensor_type.shape.dim[1].dim_value
    assert rows > 4, "a YOLOv8 detection output"
    raw = f"{output.name}_before_drift"
    for node in graph.node:
        node.output[:] = [raw if name == output.name else name for name in node.output]
    scale = np.ones((1, rows, 1), np.float32)
    scale[0, 4:, 0] = factor
    graph.initializer.append(numpy_helper.from_array(scale, "class_score_drift"))
    graph.node.append(helper.make_node("Mul", [raw, "class_score_drift"], [output.name], name="drift"))
    onnx.checker.check_model(model)
    onnx.save(model, str(target))
    return target


def renamed_onnx(source: Path, target: Path, names: dict[int, str]) -> Path:
    """``source`` with some class names changed in its ``names`` metadata (a custom model)."""
    import ast

    import onnx

    model = onnx.load(str(source))
    meta = next(prop for prop in model.metadata_props if prop.key == "names")
    meta.value = repr({**ast.literal_eval(meta.value), **names})
    onnx.save(model, str(target))
    return target


def onnx_candidates(weights: Path, folder: Path, name: str) -> dict[str, Path]:
    """``weights`` exported to ONNX at 320 px into ``folder`` as ``<name>.onnx`` (what serves), and a
    rollout's candidates beside it: ``<name>-reexported.onnx`` (the same model exported again: it
    agrees, so it is promoted) and ``<name>-drifted.onnx`` (class scores halved: rolled back)."""
    from app.inference.export import export_onnx

    served = export_onnx(weights, folder / f"{name}.onnx", imgsz=320, dynamic_batch=True, threads=2)
    again = export_onnx(weights, folder / f"{name}-reexported.onnx", imgsz=320, dynamic_batch=True, threads=2)
    return {"served": served, "reexported": again, "drifted": drifted(served, folder / f"{name}-drifted.onnx")}
