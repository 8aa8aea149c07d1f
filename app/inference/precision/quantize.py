"""Static int8 (QDQ) quantisation of a YOLO ONNX export, calibrated on the user's frames.

CPU nodes have no fp16 units worth using, so int8 is the cheap speed-up there; it is only
worth shipping when it keeps the accuracy, which depends on *what* is quantised and on
*how the activation ranges are calibrated*. Both choices were measured on coco-val128
(docs/benchmarks.md, "int8"). The calibration frames go through the service's own decode
and letterbox, so the ranges are those the server will see.
"""

from __future__ import annotations

import ast
import contextlib
import io
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from app.core.errors import ConfigError, ServiceError
from app.core.imgsz import ImgSize, input_hw, parse_imgsz
from app.inference.export import META_PRECISION, set_metadata
from app.inference.vision.decode import IMAGE_SUFFIXES, image_files

_MODULE = re.compile(r"^/model\.(\d+)/")


@dataclass(frozen=True)
class YoloOnnx:
    """What the quantiser needs to know about a YOLO ONNX export, read from the file."""

    path: Path
    input_name: str
    imgsz: ImgSize
    names: dict[int, str]
    head_prefix: str  # "/model.22/" for YOLOv8: the Detect module's node-name prefix
    batch: int | None  # the fixed batch the graph takes, None for a dynamic batch axis


def inspect_yolo_onnx(path: Path) -> YoloOnnx:
    """Check ``path`` is an Ultralytics YOLO detection export and read its shape facts.

    Refusing here gives one clear sentence instead of an onnxruntime traceback from deep
    inside calibration.
    """
    import onnx

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"ONNX model not found: {path}")
    try:
        proto = onnx.load(str(path), load_external_data=False)
    except Exception as exc:
        raise ConfigError(f"{path} is not a readable ONNX model: {exc}") from None
    not_yolo = f"{path} is not a YOLO ONNX export (make one with `campusguard export`)"
    meta = {p.key: p.value for p in proto.metadata_props}
    try:
        names = {int(k): str(v) for k, v in ast.literal_eval(meta["names"]).items()}
    except Exception:
        raise ConfigError(f"{not_yolo}: no readable 'names' metadata") from None
    if meta.get("task", "detect") != "detect":
        raise ConfigError(f"{not_yolo}: task is {meta['task']!r}, only detection models are served")
    graph = proto.graph
    if len(graph.input) != 1 or len(graph.output) < 1:
        raise ConfigError(f"{not_yolo}: expected one image input")
    dims = [d.dim_value if d.HasField("dim_value") else None for d in graph.input[0].type.tensor_type.shape.dim]
    if len(dims) != 4 or dims[1] != 3 or not (dims[2] and dims[3]):
        raise ConfigError(f"{not_yolo}: the input must be N x 3 x H x W with fixed H and W, got {dims}")
    out_dims = [d.dim_value or None for d in graph.output[0].type.tensor_type.shape.dim]
    if len(out_dims) != 3 or out_dims[1] not in (None, 4 + len(names)):
        raise ConfigError(f"{not_yolo}: the output must be N x (4 + {len(names)} classes) x anchors, got {out_dims}")
    modules = sorted({int(m.group(1)) for n in graph.node if (m := _MODULE.match(n.name))})
    if not modules:
        raise ConfigError(f"{not_yolo}: its nodes are not named /model.N/... as Ultralytics names them")
    declared = meta.get("campusguard_imgsz")
    imgsz = parse_imgsz(declared) if declared else (dims[2] if dims[2] == dims[3] else (dims[2], dims[3]))
    return YoloOnnx(path, graph.input[0].name, imgsz, names, f"/model.{modules[-1]}/", dims[0])


# --- calibration frames --------------------------------------------------------------------

def calibration_images(folder: Path, limit: int | None = None) -> list[Path]:
    """Image files of ``folder`` (or its ``images/`` subfolder, as a YOLO dataset has),
    sorted, spread evenly when ``limit`` is smaller than the folder."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError(f"calibration folder not found: {folder}")
    root = folder / "images" if (folder / "images").is_dir() else folder
    images = image_files(root)
    if not images:
        raise ConfigError(f"no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in calibration folder {root}")
    if limit is not None:
        if limit < 1:
            raise ConfigError(f"--calib-images must be >= 1, got {limit}")
        if limit < len(images):
            picks = np.linspace(0, len(images) - 1, limit).round().astype(int)
            images = [images[i] for i in picks]
    return images


def letterboxed_frames(images: list[Path], imgsz: ImgSize, max_pixels: int = 40_000_000,
                       progress: bool = True) -> list[np.ndarray]:
    """Decode and letterbox each frame exactly as the service does (HWC uint8)."""
    from tqdm import tqdm

    from app.inference.vision.decode import decode_image
    from app.inference.vision.preprocess import letterbox

    frames = []
    for path in tqdm(images, desc="read calibration frames", unit="img", file=sys.stderr, disable=not progress):
        try:
            frames.append(letterbox(decode_image(path.read_bytes(), max_pixels), input_hw(imgsz))[0])
        except (ServiceError, OSError) as exc:
            message = getattr(exc, "message", None) or str(exc)
            raise ConfigError(f"calibration image {path} cannot be used: {message}") from None
    return frames


class FrameReader:
    """onnxruntime's ``CalibrationDataReader`` over letterboxed frames, ``batch`` per run
    (a model exported with a fixed batch takes only that many; the last run repeats a frame).

    ``set_range`` (in runs) lets ``quantize_static`` collect in strides, so the histogram
    calibrators never hold every activation of every frame at once (gigabytes at 640).
    """

    def __init__(self, frames: list[np.ndarray], input_name: str, batch: int = 1,
                 on_frames: Callable[[int], object] | None = None) -> None:
        self.frames = frames
        self.input_name = input_name
        self.batch = batch
        self.on_frames = on_frames
        self._pos, self._end = 0, len(self)

    def __len__(self) -> int:
        return -(-len(self.frames) // self.batch)

    def set_range(self, start_index: int, end_index: int) -> None:
        self._pos, self._end = start_index, min(end_index, len(self))

    def get_next(self) -> dict[str, np.ndarray] | None:
        from app.inference.vision.preprocess import to_batch

        if self._pos >= self._end:
            return None
        chunk = self.frames[self._pos * self.batch:(self._pos + 1) * self.batch]
        self._pos += 1
        if self.on_frames is not None:
            self.on_frames(len(chunk))
        return {self.input_name: to_batch(chunk + chunk[-1:] * (self.batch - len(chunk)))}


def stride_for(count: int, most: int = 8) -> int:
    """Largest divisor of ``count`` up to ``most`` (quantize_static insists on one)."""
    return next(s for s in range(min(most, count), 0, -1) if count % s == 0)


METHODS = ("minmax-avg", "minmax", "entropy", "percentile")  # docs/benchmarks.md compares them


# --- what stays fp32 -----------------------------------------------------------------------

@dataclass(frozen=True)
class Recipe:
    """The quantisation choices; the defaults are the measured best (docs/benchmarks.md)."""

    method: str = "minmax-avg"  # one of METHODS
    per_channel: bool = True
    keep_fp32: tuple[str, ...] = ("decode", "dfl", "last-convs")  # parts named in FP32_PARTS
    bounded: bool = True  # Sigmoid/Softmax outputs get their true 0..1 range, not a calibrated one


def bounded_ranges(model) -> dict[str, list[dict]]:
    """0..1 for the image input and every Sigmoid and Softmax output: known by construction.

    A histogram calibrator (entropy) would otherwise clip the top of a probability to
    save resolution, which is exactly the confident part the detector depends on; and
    pixels k/255 quantise losslessly with the scale 1/255 that the full range gives.
    """
    tensors = [model.graph.input[0].name]
    tensors += [out for n in model.graph.node if n.op_type in ("Sigmoid", "Softmax") for out in n.output]
    return {name: [{"rmin": np.float32(0.0), "rmax": np.float32(1.0)}] for name in tensors}


# Parts of a YOLOv8-style Detect head (names relative to its "/model.N/" prefix) that can
# be left in float. ``decode``: box decoding and class sigmoid after the convolutions
# (anchors, and the final concat of pixel boxes with 0..1 scores: one int8 scale cannot
# hold both). ``dfl``: the distribution-focal-loss softmax and its 1x1 convolution.
# ``last-convs``: the final 1x1 convolutions of both branches. ``box-branch``: every box
# convolution. ``head``: the whole module.
HEAD_PARTS: dict[str, str] = {
    "decode": r"(?!cv[23]\.\d+/|dfl/)",
    "dfl": r"dfl/",
    "last-convs": r"cv[23]\.\d+/cv[23]\.\d+\.2/",
    "box-branch": r"cv2\.\d+/",
    "head": r"",
}
FP32_PARTS = (*HEAD_PARTS, "first")  # "first": the first convolution, which sees raw pixels


def fp32_nodes(model, head_prefix: str, parts: tuple[str, ...]) -> list[str]:
    """Names of the nodes left in float for the named parts (HEAD_PARTS, or "first")."""
    unknown = set(parts) - set(FP32_PARTS)
    if unknown:
        raise ConfigError(f"unknown fp32 part(s) {sorted(unknown)}; choose from {', '.join(FP32_PARTS)}")
    names = set()
    for part in parts:
        if part == "first":
            names.add(next(n.name for n in model.graph.node if n.op_type == "Conv"))
            continue
        pattern = re.compile(re.escape(head_prefix) + HEAD_PARTS[part])
        names.update(n.name for n in model.graph.node if pattern.match(n.name))
    return sorted(names)


def quantize(fp32: YoloOnnx, out: Path, reader: FrameReader, recipe: Recipe = Recipe()) -> Path:
    """Write the QDQ int8 model of ``fp32`` to ``out`` with the model's metadata kept."""
    import tempfile

    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    methods = {"minmax-avg": CalibrationMethod.MinMax, "minmax": CalibrationMethod.MinMax,
               "entropy": CalibrationMethod.Entropy, "percentile": CalibrationMethod.Percentile}
    if recipe.method not in methods:
        raise ConfigError(f"unknown calibration method {recipe.method!r}; choose from {', '.join(METHODS)}")
    options: dict[str, bool | int] = {"ActivationSymmetric": False, "WeightSymmetric": True}
    if recipe.method == "minmax-avg":
        # Mean of each frame's range. onnxruntime averages within one collection pass but
        # blends later passes in with weight 0.01, so there must be a single pass: the
        # min/max calibrator keeps only reduced values per frame, so that is affordable.
        options["CalibMovingAverage"] = True
    elif recipe.method != "minmax":
        # Histogram calibrators keep every activation of a pass: collect in strides.
        options["CalibStridedMinMax"] = stride_for(len(reader))
    with tempfile.TemporaryDirectory(prefix="campusguard-int8-") as tmp:
        prepared = Path(tmp) / "prepared.onnx"
        # Shape inference + graph optimisation first, as onnxruntime's quantisation guide
        # asks. ONNX's own shape inference is enough for a CNN; the symbolic one gives up
        # on a dynamic batch axis (and drops a scratch file into the working directory).
        quant_pre_process(str(fp32.path), str(prepared), skip_symbolic_shape=True)
        model = onnx.load(str(prepared))
        # The calibrators print their own banners to stdout, which carries our result path.
        with contextlib.redirect_stdout(io.StringIO()):
            quantize_static(
                str(prepared), str(out), reader, quant_format=QuantFormat.QDQ, per_channel=recipe.per_channel,
                activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                nodes_to_exclude=fp32_nodes(model, fp32.head_prefix, recipe.keep_fp32),
                calibrate_method=methods[recipe.method],
                extra_options={**options, "TensorQuantOverrides": bounded_ranges(model) if recipe.bounded else {}},
            )
    original = onnx.load(str(fp32.path), load_external_data=False)
    quantized = onnx.load(str(out))
    del quantized.metadata_props[:]
    quantized.metadata_props.extend(original.metadata_props)
    set_metadata(quantized, {META_PRECISION: "int8", "campusguard_int8_recipe": _describe(recipe)})
    onnx.save(quantized, str(out))
    return out


def _describe(recipe: Recipe) -> str:
    return (f"method={recipe.method} per_channel={str(recipe.per_channel).lower()} "
            f"fp32={','.join(recipe.keep_fp32) or 'none'} bounded={str(recipe.bounded).lower()}")
