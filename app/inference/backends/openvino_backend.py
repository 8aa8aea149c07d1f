"""OpenVINO on the CPU: one compiled model per fixed shape, several requests in flight.

The IR is built from the configured ``.pt`` (``openvino_ir.py``) per shape and precision.
Precision is set explicitly, never left to OpenVINO: on a CPU with bf16 its default is to run
an fp32 model in bf16 without saying so (issue #32 measured it), so fp32 and int8 compile with
``INFERENCE_PRECISION_HINT=f32`` (int8: the parts NNCF left in float, the box decoding above
all, stay f32) and bf16 with ``bf16``.

Requests in flight: with ``inflight`` 0 (auto) or > 1 each shape is compiled a second time
with the THROUGHPUT hint (OpenVINO splits the cores into streams), its requests are shared by
the engine's lanes (one per request, ``lanes``), and a micro-batch of N frames becomes N
batch-1 requests run side by side (``RequestPool``). A frame alone in flight runs on the
model compiled with the LATENCY hint (every core on one request): on one stream's share of
the cores it would take about twice as long on two cores (measured), hence the two compiled
models (``CallCount``). ``inflight`` 1 compiles the LATENCY one only: one lane.

The compiled model takes the letterboxed frames as they are, uint8 (N, H, W, 3) RGB: the
conversion to float NCHW in 0..1 is a pre-processing step compiled into the graph
(OpenVINO's ``PrePostProcessor``), where the plugin fuses it into the first layer, instead of
a pass over every frame in numpy (``to_batch``) and a four times larger input. And each
request's head output is compacted where it lies (``candidates``): no copy of the whole head
per frame. Together, through the server on 2 cores (openvino int8, 4 clients, 3 rounds side by
side with the float input): 57-60 -> 64-67 img/s, the lanes' CPU 3.1 -> 0.9 ms per frame.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from app.core.errors import ConfigError
from app.core.imgsz import ImgSize
from app.core.memory import trim_heap
from app.core.types import DeviceInfo, GpuInventory, MemoryStats
from app.inference.backends.base import BackendOptions, Detector
from app.inference.backends.inflight import CallCount, RequestPool
from app.inference.backends.openvino_ir import ensure_ir, import_openvino, read_meta
from app.inference.devices import process_memory, validate_device
from app.inference.vision.candidates import Candidates, floors_of

log = logging.getLogger("campusguard.openvino")
Shape = tuple[int, int]
T = TypeVar("T")
HINTS = {"fp32": "f32", "int8": "f32", "bf16": "bf16"}


def compile_config(precision: str, threads: int, inflight: int) -> dict[str, object]:
    """The CPU plugin's properties for ``precision``: LATENCY for ``inflight`` 1 (one frame,
    every core), else THROUGHPUT (``inflight`` > 1 caps the requests; 0 lets OpenVINO pick)."""
    config: dict[str, object] = {"INFERENCE_PRECISION_HINT": HINTS[precision],
                                 "PERFORMANCE_HINT": "LATENCY" if inflight == 1 else "THROUGHPUT"}
    if threads > 0:
        config["INFERENCE_NUM_THREADS"] = threads
    if inflight > 1:
        config["PERFORMANCE_HINT_NUM_REQUESTS"] = inflight
    return config


@dataclass
class _Session:
    """One shape's compiled models: one request for a single frame (LATENCY), a request queue
    for a micro-batch (THROUGHPUT, or the LATENCY model when one request is in flight)."""

    # OpenVINO's objects (untyped here: openvino has no type information for mypy)
    compiled: Any  # the LATENCY model
    fan_out: Any  # the THROUGHPUT model (the LATENCY one when ``inflight`` is 1)
    single: Any  # ov.InferRequest of the LATENCY model
    pool: RequestPool  # the requests of ``fan_out``
    lock: threading.Lock


class OpenVinoDetector:
    backend = "openvino"

    def __init__(self, folders: dict[Shape, Path], precision: str = "fp32", threads: int = 0, inflight: int = 0,
                 model_name: str | None = None, imgsz: ImgSize | None = None) -> None:
        if precision not in HINTS:
            raise ConfigError(f"backend openvino runs fp32, bf16 or int8, not {precision}")
        ov = import_openvino()
        self._device_info = validate_device("cpu", GpuInventory("none"))
        self.core = ov.Core()
        if precision == "bf16" and "BF16" not in self.core.get_property("CPU", "OPTIMIZATION_CAPABILITIES"):
            raise ConfigError("precision bf16: OpenVINO finds no bf16 support on this CPU (avx512_bf16 or amx_bf16)")
        self.sessions: dict[Shape, _Session] = {}
        for shape, folder in folders.items():
            latency = self._compile(folder, compile_config(precision, threads, 1))
            fan_out = latency if inflight == 1 else self._compile(folder, compile_config(precision, threads, inflight))
            requests = int(fan_out.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS"))
            self.sessions[shape] = _Session(latency, fan_out, latency.create_infer_request(),
                                            RequestPool(fan_out, requests), threading.Lock())
        first = next(iter(folders.values()))
        meta = read_meta(first)
        self.names: dict[int, str] = {int(k): str(v) for k, v in meta["names"].items()}
        self.shapes: tuple[Shape, ...] = tuple(folders)
        self.imgsz: ImgSize = imgsz if imgsz is not None else self.shapes[0]
        self.precision = precision
        self.model_name = model_name or Path(meta["weights"]).stem
        compiled = self.sessions[self.shapes[0]].compiled
        self.streams = int(self.sessions[self.shapes[0]].fan_out.get_property("NUM_STREAMS"))
        self.inflight = self.sessions[self.shapes[0]].pool.size
        self.lanes = 1 if inflight == 1 else self.inflight  # the engine's workers (app/inference/lanes.py)
        self._calls = CallCount()
        self.provider = f"openvino-cpu-{HINTS[precision]}"
        actual = str(compiled.get_property("INFERENCE_PRECISION_HINT"))
        log.info("OpenVINO %s on CPU: inference precision %s, %s streams, %s requests in flight, shapes %s",
                 ov.__version__, actual, self.streams, self.inflight, ", ".join(f"{h}x{w}" for h, w in self.shapes))

    def _compile(self, folder: Path, config: dict[str, object]):
        try:
            return self.core.compile_model(uint8_input(self.core.read_model(str(folder / "model.xml"))), "CPU", config)
        except Exception as exc:
            raise ConfigError(f"OpenVINO could not compile {folder / 'model.xml'}: {exc}") from exc

    @classmethod
    def from_options(cls, options: BackendOptions, calibration: tuple[Path, ...] = (),
                     progress: Callable[[str], None] = lambda _: None) -> OpenVinoDetector:
        """Build (or find cached) the IR of every shape, then compile each."""
        if options.weights.suffix.lower() == ".onnx":
            raise ConfigError("backend openvino builds its model from the .pt weights (CAMPUSGUARD_WEIGHTS); "
                              f"got {options.weights}: serve an .onnx with CAMPUSGUARD_BACKEND=onnx")
        shapes = options.all_shapes
        folders = {}
        for i, shape in enumerate(shapes, 1):
            label = f" {i}/{len(shapes)} ({shape[0]}x{shape[1]})"
            folders[shape] = ensure_ir(options.weights, shape, options.precision, options.onnx_cache_dir, calibration,
                                       progress, label)
        return cls(folders, options.precision, options.threads, options.inflight, options.model_name, options.imgsz)

    def _session(self, images: np.ndarray) -> _Session:
        shape = (images.shape[1], images.shape[2])
        try:
            return self.sessions[shape]
        except KeyError:
            raise ValueError(f"no OpenVINO model for input shape {shape[0]}x{shape[1]}; built for "
                             f"{', '.join(f'{h}x{w}' for h, w in self.shapes)}") from None

    def _run(self, images: np.ndarray, keep: Callable[[int, np.ndarray], T]) -> list[T]:
        """uint8 (N, H, W, 3) -> per image ``keep(index, its output (1, 4 + nc, anchors))``.
        Thread-safe: the engine's lanes call it side by side. A lone frame with nothing else
        in flight takes the LATENCY model."""
        images = np.ascontiguousarray(images, dtype=np.uint8)
        session = self._session(images)
        with self._calls.enter() as alone:
            if len(images) == 1 and alone:  # one lane: always alone (the pipeline serialises its calls)
                with session.lock:
                    session.single.infer({0: images}, share_inputs=True)
                    return [keep(0, session.single.get_output_tensor(0).data)]
            return session.pool.run(images, keep)

    def candidates(self, images: np.ndarray, floor: float | Sequence[float]) -> list[Candidates]:
        """uint8 (N, H, W, 3) letterboxed RGB -> per image the anchors above ``floor``, read
        from the request's output where it lies."""
        floors = floors_of(floor, len(images))
        return self._run(images, lambda i, out: Candidates.of_head(out[0], float(floors[i])))

    def infer(self, batch: np.ndarray) -> np.ndarray:
        """(N, 3, H, W) float32 in 0..1 (``to_batch``'s output: uint8 / 255) -> (N, 4 + nc,
        anchors). The model takes the uint8 frames back (exact: every value is k / 255)."""
        return np.stack(self._run(to_uint8(batch), lambda _, out: out[0].copy()))

    def raw_call(self, batch: np.ndarray) -> Callable[[], object]:
        """The compiled model alone on a letterboxed batch (requests in flight included),
        given in the model's own input dtype (uint8 NHWC) before it is timed."""
        images = to_uint8(batch)
        return lambda: self._run(images, lambda _, out: out[0].copy())

    def device_info(self) -> DeviceInfo:
        return self._device_info

    def memory(self) -> MemoryStats:
        return process_memory()

    def release_cache(self) -> None:
        trim_heap()

    def close(self) -> None:
        self.sessions = {}


def uint8_input(model):
    """``model`` taking uint8 (N, H, W, 3) in 0..255: the conversion to float (N, 3, H, W) in
    0..1 becomes the graph's first step."""
    from openvino import Layout, Type
    from openvino.preprocess import PrePostProcessor

    ppp = PrePostProcessor(model)
    ppp.input().tensor().set_element_type(Type.u8).set_layout(Layout("NHWC"))
    ppp.input().model().set_layout(Layout("NCHW"))
    ppp.input().preprocess().convert_element_type(Type.f32).scale(255.0)
    return ppp.build()


def to_uint8(batch: np.ndarray) -> np.ndarray:
    """float (N, 3, H, W) in 0..1 -> uint8 (N, H, W, 3), the frames ``to_batch`` was given."""
    return np.ascontiguousarray(np.rint(np.asarray(batch, np.float32) * 255).clip(0, 255).astype(np.uint8)
                                .transpose(0, 2, 3, 1))


def load_openvino(options: BackendOptions, calibration: tuple[Path, ...] = (),
                  progress: Callable[[str], None] = lambda _: None) -> Detector:
    return OpenVinoDetector.from_options(options, calibration, progress)
