"""ONNX Runtime: one session, ``ORT_ENABLE_ALL``, provider chosen by ordered fallback.

AMD builds: ``onnxruntime-migraphx`` (ORT >= 1.23) offers MIGraphX only; older
``onnxruntime-rocm`` (<= 1.22) offers ROCm, a provider ONNX Runtime 1.23 removed. The ``rocm``
alias still names it (a site on an old AMD wheel keeps working), and asking for it on a
build without it says so and names ``migraphx`` instead of a bare "no GPU provider".
MIGraphX compiles the graph when the session starts (minutes for large models) and again
whenever the input shape changes, so on MIGraphX every call runs one fixed batch
(``max_batch_size``, padded) and the compiled program is cached under ``onnx_cache_dir``,
keyed by model content, batch and precision.

A GPU device that ends up on the CPU provider is refused: ONNX Runtime's Python wrapper
prints an "EP Error" and silently retries on CPU when a GPU provider fails to start, and a
service that says ``cuda:0`` while running on the CPU is a capacity incident waiting to
happen. ``onnx_cpu_fallback=true`` accepts the fallback explicitly.
"""

from __future__ import annotations

import ast
import contextlib
import io
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort
from packaging.version import Version

from app.core.errors import ConfigError, OutOfMemory
from app.core.imgsz import ImgSize, format_imgsz, input_hw, parse_imgsz
from app.core.memory import trim_heap
from app.core.types import DeviceInfo, GpuInventory, MemoryStats
from app.inference.backends.base import BackendOptions
from app.inference.backends.inflight import CallCount
from app.inference.backends.onnx_inflight import FanOut, auto_inflight
from app.inference.devices import (
    gpu_memory_without_torch,
    parse_device,
    process_memory,
    torch_inventory,
    validate_device,
)
from app.inference.export import META_IMGSZ, cached_export_path, export_onnx, file_digest

log = logging.getLogger("campusguard.onnx")
GPU_PROVIDERS = ("MIGraphXExecutionProvider", "ROCMExecutionProvider", "CUDAExecutionProvider",
                 "TensorrtExecutionProvider")
CPU = "CPUExecutionProvider"
MIGRAPHX = "MIGraphXExecutionProvider"
ROCM = "ROCMExecutionProvider"  # onnxruntime-rocm <= 1.22 only
MIGRAPHX_CACHE_DIR_SINCE = Version("1.23")  # microsoft/onnxruntime#25338 replaced the save/load keys


def choose_providers(preferred: list[str], available: list[str], device: str) -> list[str]:
    """Preferred providers that this onnxruntime build offers, CPU always last.

    On ``device=cpu`` GPU providers are skipped even when installed.
    """
    chosen = [p for p in preferred if p in available and (device != "cpu" or p == CPU)]
    if CPU not in chosen:
        chosen.append(CPU)
    return chosen


def require_gpu_provider(device: str, preferred: Sequence[str], cpu_fallback: bool) -> str | None:
    """The GPU provider a GPU device will ask for; ConfigError when this build has none
    (unless the CPU fallback is accepted). Checked before any export work."""
    available = ort.get_available_providers()
    wanted = next((p for p in choose_providers(list(preferred), available, device) if p != CPU), None)
    if device != "cpu" and wanted is None and not cpu_fallback:
        removed = (" ONNX Runtime 1.23 removed the ROCm execution provider ('rocm'): on AMD GPUs ask for "
                   "'migraphx' (CAMPUSGUARD_ONNX_PROVIDERS=migraphx,cpu) with onnxruntime-migraphx."
                   if ROCM in preferred and MIGRAPHX not in available else "")
        raise ConfigError(
            f"device {device!r} needs a GPU execution provider, but this onnxruntime build "
            f"({ort.__version__}) offers only {available} (asked for {list(preferred)}).{removed} Install "
            "onnxruntime-gpu / onnxruntime-migraphx, use device=cpu, or set CAMPUSGUARD_ONNX_CPU_FALLBACK=true.")
    return wanted


def migraphx_options(device_index: int, fp16: bool, cache_dir: Path, model_path: Path, batch: int,
                     ort_version: str) -> dict[str, str]:
    """MIGraphX provider options for this onnxruntime version.

    ORT < 1.23 takes explicit save/load paths of one ``.mxr`` file; ORT >= 1.23 rejects
    those keys ("Invalid MIGraphX EP option", microsoft/onnxruntime#25379) and takes
    ``migraphx_model_cache_dir``, naming the files itself. Either way the location is keyed
    by model content, batch and precision, so another batch or precision never loads a
    program compiled for a different shape.
    """
    key = f"{model_path.stem}-{file_digest(model_path)}-b{batch}-{'fp16' if fp16 else 'fp32'}"
    opts = {"device_id": str(device_index), "migraphx_fp16_enable": "1" if fp16 else "0"}
    if Version(ort_version.split("+")[0]) >= MIGRAPHX_CACHE_DIR_SINCE:
        folder = cache_dir / "migraphx" / key
        folder.mkdir(parents=True, exist_ok=True)
        return opts | {"migraphx_model_cache_dir": str(folder)}
    compiled = cache_dir / "migraphx" / f"{key}.mxr"
    compiled.parent.mkdir(parents=True, exist_ok=True)
    opts |= {"migraphx_save_compiled_model": "1", "migraphx_save_model_path": str(compiled)}
    if compiled.is_file():
        opts |= {"migraphx_load_compiled_model": "1", "migraphx_load_model_path": str(compiled)}
    return opts


def arena_spec(provider: str, device_index: int | None) -> str:
    """``memory.enable_memory_arena_shrinkage`` value for the provider that actually runs.

    Naming a GPU arena on a CPU session is an INVALID_ARGUMENT on every run that carries it.
    """
    if provider == CPU or device_index is None:
        return "cpu:0"
    return f"cpu:0;gpu:{device_index}"


def graph_precision(model_path: Path, input_dtype: type) -> str:
    """"int8" for a quantised graph (QDQ or integer ops), else the input's float width."""
    try:
        import onnx

        graph = onnx.load(str(model_path), load_external_data=False).graph
        quantised = {"QuantizeLinear", "DynamicQuantizeLinear", "QLinearConv", "ConvInteger"}
        if any(n.op_type in quantised for n in graph.node):
            return "int8"
    except Exception:  # onnx missing or an unreadable graph: the input type still answers
        pass
    return "fp16" if input_dtype == np.float16 else "fp32"


class OnnxDetector:
    backend = "onnx"

    def __init__(self, model_path: Path, device: str = "cpu", imgsz: ImgSize = 640,
                 providers: Sequence[str] = ("CPUExecutionProvider",), threads: int = 1,
                 cache_dir: Path = Path(".cache/campusguard"), migraphx_fp16: bool = False,
                 max_batch_size: int = 8, half: bool = False, cpu_fallback: bool = False,
                 model_name: str | None = None, inflight: int = 1) -> None:
        index = parse_device(device)
        inventory = GpuInventory("none") if index is None else _gpu_inventory()
        self._device_info = validate_device(device, inventory)
        chosen = choose_providers(list(providers), ort.get_available_providers(), device)
        wanted_gpu = require_gpu_provider(device, providers, cpu_fallback)
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.intra_op_num_threads = threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.log_severity_level = 3
        if index is None:
            # A server's cores are shared with decoding, letterboxing and the event loop:
            # intra-op threads that spin between runs burn them (measured: 2 spinning threads
            # on a busy 2-core host ran at 0.46x the speed and 1.7x the CPU per image of 2 that
            # sleep; docs/benchmarks.md, "Where the time goes, after each change").
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options = [migraphx_options(index or 0, migraphx_fp16, cache_dir, model_path, max_batch_size, ort.__version__)
                   if p == MIGRAPHX else ({"device_id": str(index or 0)} if p in GPU_PROVIDERS else {})
                   for p in chosen]
        captured = io.StringIO()
        try:
            with contextlib.redirect_stdout(captured):  # where ORT's wrapper prints its "EP Error"
                self.session = ort.InferenceSession(str(model_path), sess_options=opts, providers=chosen,
                                                    provider_options=options)
        except Exception as exc:
            raise ConfigError(f"onnxruntime could not load {model_path}: {exc}") from exc
        self.provider = self.session.get_providers()[0]
        if wanted_gpu is not None and self.provider == CPU:
            why = _ep_error(captured.getvalue()) or ("onnxruntime did not register it (see its log above: "
                                                     "usually a missing CUDA/cuDNN/ROCm library)")
            if not cpu_fallback:
                raise ConfigError(f"{wanted_gpu} failed to start for device {device!r}: {why}. onnxruntime fell "
                                  "back to CPUExecutionProvider; refusing to run on the CPU while the device says "
                                  "GPU (set CAMPUSGUARD_ONNX_CPU_FALLBACK=true to accept it)")
            log.warning("%s failed to start (%s); running on CPUExecutionProvider as onnx_cpu_fallback allows",
                        wanted_gpu, why)
        meta = self.session.get_modelmeta().custom_metadata_map
        self.names = _parse_names(meta.get("names"))
        inp = self.session.get_inputs()[0]
        self.input_name = inp.name
        self.input_dtype = np.float16 if "float16" in inp.type else np.float32
        # MIGraphX recompiles on every new shape: run one batch size, padded.
        self.fixed_batch: int | None = inp.shape[0] if isinstance(inp.shape[0], int) else (
            max_batch_size if self.provider == MIGRAPHX else None)
        declared = meta.get(META_IMGSZ)
        if declared is None and all(isinstance(d, int) for d in inp.shape[2:4]):
            declared = f"{inp.shape[2]}x{inp.shape[3]}"
        self.imgsz: ImgSize = parse_imgsz(declared) if declared else imgsz
        if input_hw(self.imgsz) != input_hw(imgsz):
            raise ConfigError(f"{model_path} was exported for imgsz {format_imgsz(self.imgsz)}, "
                              f"settings ask for {format_imgsz(imgsz)}")
        self.shapes: tuple[tuple[int, int], ...] = (input_hw(self.imgsz),)
        self.precision = graph_precision(model_path, self.input_dtype)
        if self.provider == MIGRAPHX and migraphx_fp16 and self.precision == "fp32":
            self.precision = "fp16"  # MIGraphX quantises the fp32 graph itself
        if half and self.precision == "fp32":
            log.warning("precision fp16 but %s is an fp32 graph: inference stays fp32 (export it with "
                        "`campusguard export --half`, or let the service export the .pt)", model_path)
        self.model_name = model_name or model_path.stem
        self._arena = arena_spec(self.provider, self._device_info.index)
        self._shrink_next = False
        self._fan_out = self._in_flight(model_path, opts, chosen, inflight, threads)
        self.inflight = self._fan_out.count if self._fan_out is not None else 1
        self.lanes = self.inflight  # the engine's workers (app/inference/lanes.py): session.run is thread-safe
        self._calls = CallCount()

    def _in_flight(self, model_path: Path, opts: ort.SessionOptions, providers: list[str], inflight: int,
                   threads: int) -> FanOut | None:
        """On the CPU provider, a second session with one intra-op thread that runs a
        micro-batch's images side by side (onnx_inflight.py); None for one at a time."""
        count = auto_inflight(threads) if inflight == 0 else inflight
        if self.provider != CPU or self.fixed_batch not in (None, 1) or count < 2:
            return None
        opts.intra_op_num_threads = 1
        session = ort.InferenceSession(str(model_path), sess_options=opts, providers=[CPU])
        name = self.input_name
        return FanOut(lambda one: session.run(None, {name: one})[0].astype(np.float32, copy=False), count)

    @classmethod
    def from_options(cls, options: BackendOptions) -> OnnxDetector:
        weights = options.weights
        require_gpu_provider(options.device, list(options.onnx_providers), options.onnx_cpu_fallback)
        if weights.suffix.lower() == ".onnx":
            if not weights.is_file():
                raise ConfigError(f"ONNX model not found: {weights}")
            return cls._build(weights, options)
        # .pt or architecture .yaml: export once (fixed HxW) and cache it. Dynamic batch,
        # except for MIGraphX, which compiles one shape: the batch buffer's size.
        fixed = options.device != "cpu" and MIGRAPHX in options.onnx_providers \
            and MIGRAPHX in ort.get_available_providers()
        target = cached_export_path(weights, options.imgsz, options.half, options.onnx_cache_dir)
        if fixed:
            target = target.with_name(f"{target.stem}-b{options.max_batch_size}.onnx")
        if not target.is_file():
            device = options.device if options.half else "cpu"
            tmp = target.with_suffix(f".{os.getpid()}.tmp")
            export_onnx(weights, tmp, imgsz=options.imgsz, half=options.half, dynamic_batch=not fixed,
                        batch=options.max_batch_size if fixed else 1, device=device, threads=options.threads)
            os.replace(tmp, target)
        return cls._build(target, options)

    @classmethod
    def _build(cls, model_path: Path, options: BackendOptions) -> OnnxDetector:
        return cls(model_path, options.device, options.imgsz, list(options.onnx_providers), options.threads,
                   options.onnx_cache_dir, options.half, options.max_batch_size, options.half,
                   options.onnx_cpu_fallback, options.model_name, options.inflight)

    def infer(self, batch: np.ndarray) -> np.ndarray:
        """A lone frame with nothing else in flight runs on the session with every intra-op
        thread; beside another call, or as a micro-batch, each frame runs on the one-thread
        session, side by side (``FanOut``, when requests are in flight)."""
        batch = batch.astype(self.input_dtype, copy=False)
        if self._fan_out is not None:
            with self._calls.enter() as alone:
                if len(batch) > 1 or not alone:
                    return self._fan_out(batch)
                return self._run(batch)
        if self.fixed_batch is None or len(batch) == self.fixed_batch:
            return self._run(batch)
        outs = []
        step = self.fixed_batch
        for start in range(0, len(batch), step):
            chunk = batch[start:start + step]
            n = len(chunk)
            if n < step:  # pad the last chunk to the fixed batch size
                chunk = np.concatenate([chunk, np.zeros((step - n, *chunk.shape[1:]), chunk.dtype)])
            outs.append(self._run(chunk)[:n])
        return np.concatenate(outs)

    def raw_call(self, batch: np.ndarray) -> Callable[[], object]:
        """``session.run`` alone on a letterboxed batch, the input already converted (a batch
        of several images: side by side when requests are in flight)."""
        session, feed = self.session, {self.input_name: batch.astype(self.input_dtype)}
        fan_out = self._fan_out
        if fan_out is not None and len(batch) > 1:
            return lambda: fan_out(feed[self.input_name])
        return lambda: session.run(None, feed)

    def _run(self, batch: np.ndarray) -> np.ndarray:
        run_options = None
        if self._shrink_next:
            self._shrink_next = False
            run_options = ort.RunOptions()
            run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", self._arena)
        try:
            out = self.session.run(None, {self.input_name: batch}, run_options)[0]
        except Exception as exc:  # ORT raises RuntimeError-ish types for device OOM
            text = str(exc).lower()
            if "out of memory" in text or "hipmalloc" in text or "cudamalloc" in text or "bfcarena" in text:
                raise OutOfMemory(f"device out of memory at batch {len(batch)}") from exc
            if run_options is None:
                raise
            # housekeeping must never cost a frame: drop the shrinkage and run again
            log.warning("arena shrinkage %r refused (%s); disabled", self._arena, exc)
            self._arena = ""
            out = self.session.run(None, {self.input_name: batch})[0]
        return out.astype(np.float32, copy=False)

    def device_info(self) -> DeviceInfo:
        return self._device_info

    def memory(self) -> MemoryStats:
        info = self._device_info
        if info.index is None or self.provider == CPU:
            return process_memory()
        return gpu_memory_without_torch(info.platform, info.index, info.bus_id)

    def release_cache(self) -> None:
        """Arena shrinkage rides on the next run (ORT's only hook for it); the host heap is
        trimmed now."""
        self._shrink_next = bool(self._arena)
        trim_heap()

    def close(self) -> None:
        if self._fan_out is not None:
            self._fan_out.close()
            self._fan_out = None
        self.session = None


def _ep_error(printed: str) -> str:
    """The reason in ORT's "EP Error ... when using [...]" message, if it printed one."""
    for line in printed.splitlines():
        if line.startswith("EP Error"):
            return line.removeprefix("EP Error").split(" when using ")[0].strip()
    return ""


def _gpu_inventory() -> GpuInventory:
    try:
        return torch_inventory()
    except Exception:  # torch absent or broken: let onnxruntime's own error speak later
        return GpuInventory("none")


def _parse_names(raw: str | None) -> dict[int, str]:
    if not raw:
        raise ConfigError("the ONNX model has no 'names' metadata; export it with `campusguard export`")
    try:
        names = ast.literal_eval(raw)
    except (ValueError, SyntaxError) as exc:
        raise ConfigError(f"unreadable 'names' metadata in the ONNX model: {exc}") from exc
    return {int(k): str(v) for k, v in names.items()}
