"""ONNX Runtime: one session, ``ORT_ENABLE_ALL``, provider chosen by ordered fallback.

AMD builds: ``onnxruntime-migraphx`` (ORT >= 1.23) offers MIGraphX only; older
``onnxruntime-rocm`` (<= 1.22) offers ROCm. MIGraphX compiles the graph when the session
starts (minutes for large models), so its compiled program is saved to and loaded from
``onnx_cache_dir`` and restarts reuse it.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

import numpy as np
import onnxruntime as ort

from app.config import Settings, format_imgsz, input_hw, parse_imgsz
from app.devices import (DeviceInfo, GpuInventory, MemoryStats, gpu_memory_without_torch, process_memory,
                         torch_inventory, validate_device, parse_device)
from app.errors import ConfigError, OutOfMemory
from app.export import META_IMGSZ, META_PRECISION, cached_export_path, export_onnx
from app.memory import trim_heap

GPU_PROVIDERS = ("MIGraphXExecutionProvider", "ROCMExecutionProvider", "CUDAExecutionProvider", "TensorrtExecutionProvider")
CPU = "CPUExecutionProvider"


def choose_providers(preferred: list[str], available: list[str], device: str) -> list[str]:
    """Preferred providers that this onnxruntime build offers, CPU always last.

    On ``device=cpu`` GPU providers are skipped even when installed.
    """
    chosen = [p for p in preferred if p in available and (device != "cpu" or p == CPU)]
    if CPU not in chosen:
        chosen.append(CPU)
    return chosen


def provider_options(provider: str, device_index: int, settings: Settings, model_path: Path) -> dict[str, str]:
    if provider == "MIGraphXExecutionProvider":
        compiled = settings.onnx_cache_dir / f"{model_path.stem}{'-fp16' if settings.migraphx_fp16 else ''}.mxr"
        compiled.parent.mkdir(parents=True, exist_ok=True)
        opts = {"device_id": str(device_index), "migraphx_fp16_enable": "1" if settings.migraphx_fp16 else "0",
                "migraphx_save_compiled_model": "1", "migraphx_save_model_path": str(compiled)}
        if compiled.is_file():
            opts.update({"migraphx_load_compiled_model": "1", "migraphx_load_model_path": str(compiled)})
        return opts
    if provider in GPU_PROVIDERS:
        return {"device_id": str(device_index)}
    return {}


class OnnxDetector:
    backend = "onnx"

    def __init__(self, model_path: Path, settings: Settings) -> None:
        index = parse_device(settings.device)
        inventory = GpuInventory("none") if index is None else _gpu_inventory()
        self._device_info = validate_device(settings.device, inventory)
        providers = choose_providers(settings.onnx_providers, ort.get_available_providers(), settings.device)
        opts = ort.SessionOptions()
        opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        opts.intra_op_num_threads = settings.resolved_threads
        opts.inter_op_num_threads = 1
        opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        opts.log_severity_level = 3
        if "MIGraphXExecutionProvider" in providers:
            os.environ.setdefault("ORT_MIGRAPHX_MODEL_CACHE_PATH", str(settings.onnx_cache_dir))
        try:
            self.session = ort.InferenceSession(
                str(model_path), sess_options=opts, providers=providers,
                provider_options=[provider_options(p, index or 0, settings, model_path) for p in providers],
            )
        except Exception as exc:
            raise ConfigError(f"onnxruntime could not load {model_path}: {exc}") from exc
        self.provider = self.session.get_providers()[0]
        meta = self.session.get_modelmeta().custom_metadata_map
        self.names = _parse_names(meta.get("names"))
        inp = self.session.get_inputs()[0]
        self.input_name = inp.name
        self.input_dtype = np.float16 if "float16" in inp.type else np.float32
        self.fixed_batch = inp.shape[0] if isinstance(inp.shape[0], int) else None
        declared = meta.get(META_IMGSZ)
        if declared is None and all(isinstance(d, int) for d in inp.shape[2:4]):
            declared = f"{inp.shape[2]}x{inp.shape[3]}"
        self.imgsz = parse_imgsz(declared) if declared else settings.imgsz
        if input_hw(self.imgsz) != input_hw(settings.imgsz):
            raise ConfigError(f"{model_path} was exported for imgsz {format_imgsz(self.imgsz)}, "
                              f"settings ask for {format_imgsz(settings.imgsz)}")
        self.model_name = settings.model_name or model_path.stem
        self.precision = model_precision(meta, self.input_dtype)
        self._shrink_next = False

    @classmethod
    def from_settings(cls, settings: Settings) -> "OnnxDetector":
        weights = settings.weights
        if weights.suffix.lower() == ".onnx":
            if not weights.is_file():
                raise ConfigError(f"ONNX model not found: {weights}")
            return cls(weights, settings)
        # .pt or architecture .yaml: export once (dynamic batch, fixed HxW) and cache it.
        target = cached_export_path(weights, settings.imgsz, settings.half, settings.onnx_cache_dir)
        if not target.is_file():
            device = settings.device if settings.half else "cpu"
            tmp = target.with_suffix(f".{os.getpid()}.tmp")
            export_onnx(weights, tmp, imgsz=settings.imgsz, half=settings.half, dynamic_batch=True,
                        device=device, threads=settings.resolved_threads)
            os.replace(tmp, target)
        detector = cls(target, settings)
        detector.model_name = settings.model_name or weights.stem
        return detector

    def infer(self, batch: np.ndarray) -> np.ndarray:
        batch = batch.astype(self.input_dtype, copy=False)
        if self.fixed_batch is None or len(batch) == self.fixed_batch:
            return self._run(batch)
        outs = []
        step = self.fixed_batch
        for start in range(0, len(batch), step):
            chunk = batch[start:start + step]
            n = len(chunk)
            if n < step:  # pad the last chunk to the exported batch size
                chunk = np.concatenate([chunk, np.zeros((step - n, *chunk.shape[1:]), chunk.dtype)])
            outs.append(self._run(chunk)[:n])
        return np.concatenate(outs)

    def _run(self, batch: np.ndarray) -> np.ndarray:
        run_options = None
        if self._shrink_next:
            run_options = ort.RunOptions()
            arenas = "cpu:0" if self._device_info.index is None else f"cpu:0;gpu:{self._device_info.index}"
            run_options.add_run_config_entry("memory.enable_memory_arena_shrinkage", arenas)
            self._shrink_next = False
        try:
            out = self.session.run(None, {self.input_name: batch}, run_options)[0]
        except Exception as exc:  # ORT raises RuntimeError-ish types for device OOM
            text = str(exc).lower()
            if "out of memory" in text or "hipmalloc" in text or "cudamalloc" in text or "bfcarena" in text:
                raise OutOfMemory(f"device out of memory at batch {len(batch)}") from exc
            raise
        return out.astype(np.float32, copy=False)

    def device_info(self) -> DeviceInfo:
        return self._device_info

    def memory(self) -> MemoryStats:
        if self._device_info.index is None or self.provider == CPU:
            return process_memory()
        return gpu_memory_without_torch(self._device_info.platform, self._device_info.index)

    def release_cache(self) -> None:
        """Arena shrinkage rides on the next run (ORT's only hook for it); the host heap is
        trimmed now."""
        self._shrink_next = True
        trim_heap()

    def close(self) -> None:
        self.session = None


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


def model_precision(meta: dict[str, str], input_dtype: type) -> str:
    """"int8" for a `campusguard export --int8` model (its metadata says so; the input
    stays float), else the float type of the input."""
    return meta.get(META_PRECISION) or ("fp16" if input_dtype is np.float16 else "fp32")
