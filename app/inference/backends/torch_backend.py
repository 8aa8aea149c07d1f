"""PyTorch runtime: the network's forward on a letterboxed batch, no per-image predict.

On ROCm builds of torch ``cuda:N`` is the AMD GPU, so one class serves CPU, NVIDIA and AMD.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch

from app.core.errors import OutOfMemory
from app.core.imgsz import ImgSize, input_hw
from app.core.memory import trim_heap
from app.core.types import DeviceInfo, GpuInventory, MemoryStats
from app.inference.backends.base import BackendOptions
from app.inference.backends.models import check_stride, load_detection_model
from app.inference.devices import process_memory, torch_inventory, torch_memory, validate_device
from app.inference.vision.candidates import Candidates, floors_of, split_rows

UNIT = float(np.float32(1 / 255))  # the host's to_batch multiplies by this float32 constant

class TorchDetector:
    backend = "torch"

    def __init__(self, weights: Path, device: str = "cpu", imgsz: ImgSize = 640, half: bool = False,
                 threads: int = 1, model_name: str | None = None,
                 shapes: tuple[tuple[int, int], ...] = ()) -> None:
        torch.set_num_threads(threads)
        inventory = torch_inventory() if device != "cpu" else GpuInventory("none")
        self._device_info = validate_device(device, inventory)
        self.device = torch.device(device)
        self.half = half and self.device.type == "cuda"
        model = load_detection_model(weights)
        self.shapes = shapes or (input_hw(imgsz),)
        for shape in self.shapes:  # one network takes every shape: each is only checked (and warmed)
            check_stride(model, shape if shape[0] != shape[1] else shape[0])
        self.names: dict[int, str] = {int(k): str(v) for k, v in model.names.items()}
        model = model.fuse() if hasattr(model, "fuse") else model
        model = model.to(self.device).eval()
        if self.half:
            model = model.half()
        for param in model.parameters():
            param.requires_grad_(False)
        self.model = model
        self.precision = "fp16" if self.half else "fp32"
        self.imgsz = imgsz
        self.model_name = model_name or weights.stem
        self.provider = f"torch-{self._device_info.platform}"
        torch.set_num_threads(threads)  # model loading may touch it (ultralytics select_device)

    @classmethod
    def from_options(cls, options: BackendOptions) -> TorchDetector:
        return cls(options.weights, options.device, options.imgsz, options.half, options.threads, options.model_name,
                   options.all_shapes)

    def infer(self, batch: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(batch).to(self.device, non_blocking=True)
        if self.half:
            x = x.half()
        try:
            with torch.inference_mode():
                out = self.model(x)
        except torch.cuda.OutOfMemoryError as exc:
            raise OutOfMemory(f"device out of memory at batch {len(batch)}") from exc
        out = out[0] if isinstance(out, (list, tuple)) else out
        return out.float().cpu().numpy()

    def candidates(self, images: np.ndarray, floor: float | Sequence[float]) -> list[Candidates]:
        """uint8 (N, H, W, 3) letterboxed RGB -> per image the anchors above ``floor``.

        Everything between the upload and the copy back happens on the device: a quarter
        of the bytes go up (uint8, normalised there exactly as ``to_batch`` does on the
        host), and only the surviving anchors' rows come back, instead of the whole
        (N, 84, 8400) head that the host then had to scan (docs/benchmarks.md, H200). A uint8
        tensor already on the device (``app/inference/device_decode.py``) is taken as it is.
        """
        floors = torch.from_numpy(floors_of(floor, len(images))).to(self.device)
        x = torch.as_tensor(images).to(self.device, non_blocking=True)
        x = x.permute(0, 3, 1, 2).contiguous().float().mul_(UNIT)  # contiguous: the kernels of infer()
        if self.half:
            x = x.half()
        try:
            with torch.inference_mode():
                out = self.model(x)
                out = out[0] if isinstance(out, (list, tuple)) else out
                best = out[:, 4:, :].amax(dim=1)
                image_index, anchors = torch.nonzero(best.float() > floors[:, None], as_tuple=True)
                rows = out.transpose(1, 2)[image_index, anchors].float()
        except torch.cuda.OutOfMemoryError as exc:
            raise OutOfMemory(f"device out of memory at batch {len(images)}") from exc
        return split_rows(rows.cpu().numpy(), image_index.cpu().numpy(), anchors.cpu().numpy(), len(images))

    def raw_call(self, batch: np.ndarray) -> Callable[[], object]:
        """``forward`` alone on a tensor already on the device (synchronised on a GPU)."""
        x = torch.from_numpy(batch).to(self.device)
        x = x.half() if self.half else x
        model, device = self.model, self.device

        def forward() -> object:
            with torch.inference_mode():
                out = model(x)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            return out

        return forward

    def device_info(self) -> DeviceInfo:
        return self._device_info

    def memory(self) -> MemoryStats:
        if self.device.type == "cuda":
            return torch_memory(self._device_info.index or 0)
        return process_memory()

    def release_cache(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        else:
            trim_heap()

    def close(self) -> None:
        self.model = None
        self.release_cache()

