"""Loading Ultralytics checkpoints and architectures (shared by torch backend and export)."""

from __future__ import annotations

from pathlib import Path

from app.core.errors import ConfigError
from app.core.imgsz import ImgSize, format_imgsz, input_hw

WEIGHT_SUFFIXES = frozenset({".pt", ".onnx"})
ARCH_SUFFIXES = frozenset({".yaml", ".yml"})


def require_weights(weights: Path) -> None:
    """A weights file must exist; an architecture name (.yaml) may be one Ultralytics bundles.

    Checked before the socket opens and before any export, with one message everywhere."""
    if weights.suffix.lower() not in ARCH_SUFFIXES and not weights.is_file():
        raise ConfigError(f"weights file not found: {weights} (set CAMPUSGUARD_WEIGHTS or --weights)")


def coco_names() -> dict[int, str]:
    import yaml
    from ultralytics.utils import ROOT

    data = yaml.safe_load((ROOT / "cfg/datasets/coco.yaml").read_text())
    return {int(k): str(v) for k, v in data["names"].items()}


def load_detection_model(weights: Path):
    """An Ultralytics ``DetectionModel`` from a .pt checkpoint or an architecture .yaml.

    A .yaml name such as ``yolov8m.yaml`` builds random weights (benchmarks only: speed and
    memory do not depend on weight values); it is looked up in Ultralytics' bundled configs
    when it is not a path on disk. Nothing is ever downloaded.
    """
    from ultralytics.nn.tasks import DetectionModel

    if weights.suffix.lower() in ARCH_SUFFIXES:
        model = DetectionModel(str(weights), nc=80, verbose=False)
        model.names = coco_names()
        return model
    require_weights(weights)
    from ultralytics import YOLO

    try:
        network = YOLO(str(weights), task="detect").model
    except Exception as exc:
        raise ConfigError(f"could not load weights {weights}: {exc}") from exc
    if not hasattr(network, "names"):
        raise ConfigError(f"{weights} is not an Ultralytics detection checkpoint")
    return network


def check_stride(model, imgsz: ImgSize, option: str = "imgsz") -> None:
    """Refuse an input size the network cannot take, naming the nearest one that works.

    The head concatenates feature maps of every stride, so a side that is not a multiple
    of the largest stride fails on the first frame (torch) or is silently rounded up by
    Ultralytics' exporter and then fails once the ONNX input is pinned.
    """
    stride = int(max(getattr(model, "stride", [32])))
    hw = input_hw(imgsz)
    if any(side % stride for side in hw):
        fix = "x".join(str(-(-side // stride) * stride) for side in hw)
        raise ConfigError(f"{option} {format_imgsz(imgsz)} is not a multiple of the model's stride {stride} "
                          f"(try {fix})")
