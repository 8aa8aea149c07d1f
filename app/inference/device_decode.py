"""JPEGs decoded and letterboxed on the model's device, a batch at a time (CAMPUSGUARD_DECODE).

On a GPU node one CPU thread spends about 6 ms decoding a 1080p JPEG, and the host decode was
most of the service's CPU per frame. Here ``Pipeline.prepare`` only probes the header (size,
orientation, shape: the letterbox geometry needs nothing more) and the frame waits in the
queue as a ``Pending`` JPEG; when a lane takes its batch, ``letterbox_batch`` decodes every
pending JPEG of it in one ``torchvision.io.decode_jpeg(list, device=...)`` call (nvJPEG on
NVIDIA: batched decode is its fast path; ROCm builds of torchvision that carry device decode
take the same call), letterboxes each on the device with torch ops
(``app/inference/vision/device_ops.py``: the host's geometry, so boxes map back identically),
and hands the batch to a torch detector on that device as it is. Only what the rules and the
console keep (``keep``: the evidence-sized frame, or the full one for annotation) comes back
to the host, and only when asked.

What the device does not take is decoded on the host for that frame alone and counted by
reason (``app/inference/decoding.py``): progressive, CMYK, 12-bit, truncated JPEGs and other
formats before they are queued (from the header), a frame the decode call fails on in the
lane. A frame the host cannot read either fails alone with ``invalid_image``, as it does
without the device decoder.

Built for ``cpu`` too (torchvision's libjpeg decode, torch's letterbox): that is how the tests
and ``campusguard parity --decode device`` run this code on a machine without a GPU. It is
slower than OpenCV's reduced decode on a CPU, so ``auto`` never picks it there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

import cv2
import numpy as np
import torch
from torchvision.io import ImageReadMode, decode_jpeg

from app.core.errors import ServiceError
from app.inference.backends.base import Detector
from app.inference.decoding import DecoderInfo, FallbackBook, jpeg_refusal
from app.inference.pipeline import DecodePolicy, Keep, Pending, Prepared
from app.inference.vision.decode import Header, decode_pixels, reduction_for
from app.inference.vision.device_ops import letterbox_into, shrink, to_host, upright
from app.inference.vision.preprocess import PAD_VALUE, letterbox, placement
from app.inference.vision.shapes import Shape

log = logging.getLogger("campusguard.decode")


class DeviceDecoder:
    """torchvision's ``decode_jpeg`` on ``device`` plus the letterbox in torch; checked by one
    decode when built (``DeviceDecodeUnavailable`` when this torchvision cannot decode there)."""

    def __init__(self, device: str, info: DecoderInfo) -> None:
        self.device = torch.device(device)
        self.info = info
        self.fallbacks = FallbackBook()
        self._check()

    def _check(self) -> None:
        ok, buf = cv2.imencode(".jpg", np.full((16, 16, 3), 128, np.uint8))
        try:
            frame = decode_jpeg(torch.from_numpy(buf.copy()), mode=ImageReadMode.RGB, device=self.device)
        except Exception as exc:  # noqa: BLE001 - any failure means: not on this device
            raise DeviceDecodeUnavailable(f"torchvision cannot decode JPEG on {self.device}: "
                                          f"{exc.__class__.__name__}: {str(exc)[:200]}") from exc
        if tuple(frame.shape) != (3, 16, 16):
            raise DeviceDecodeUnavailable(f"torchvision's decode_jpeg on {self.device} gave {tuple(frame.shape)}")

    # --- request threads ----------------------------------------------------------------
    def takes(self, data: bytes, header: Header) -> bool:
        reason = "format" if header.fmt != "jpeg" else jpeg_refusal(data)
        if reason is None:
            return True
        self.fallbacks.count(reason)
        return False

    def defer(self, data: bytes, header: Header, target: Shape, keep: Keep, policy: DecodePolicy) -> Prepared:
        width, height = header.upright
        place = placement(width, height, target)
        reduction = 1  # what the host would decode it at: its evidence frame's size, and the fallback's
        if policy.reduce and keep != "full":
            reduction = reduction_for(header, place.box.scale, policy.evidence_min_width if keep == "evidence" else 0)
        pending = Pending(data, header, target, keep, reduction)
        prepared = Prepared(pending, place.box, reduction=reduction)
        pending.prepared = prepared
        return prepared

    # --- the lane -------------------------------------------------------------------------
    def letterbox_batch(self, images: Sequence[np.ndarray | Pending]) -> torch.Tensor:
        height, width = images[0].shape[:2]
        batch = torch.full((len(images), 3, height, width), PAD_VALUE, dtype=torch.uint8, device=self.device)
        jobs = [(i, image) for i, image in enumerate(images) if isinstance(image, Pending)]
        start = time.perf_counter()
        decoded = self._decode([job.data for _, job in jobs])
        decoded_at = time.perf_counter()
        for (i, job), frame in zip(jobs, decoded, strict=True):
            if frame is None or not self._place(batch[i], job, frame):
                self._on_host(batch[i], job)
        for i, image in enumerate(images):
            if isinstance(image, np.ndarray):  # a frame the host decoded (refused before the queue)
                batch[i] = torch.from_numpy(image).to(self.device).permute(2, 0, 1)
        done = time.perf_counter()
        for _, job in jobs:
            if job.prepared is not None:  # the batch's decode call and letterbox, as each frame waited for them
                job.prepared.decode_ms += (decoded_at - start) * 1e3
                job.prepared.preprocess_ms = (done - decoded_at) * 1e3
        return batch.permute(0, 2, 3, 1)

    def _decode(self, blobs: list[bytes]) -> list[torch.Tensor | None]:
        """Every JPEG in one call; when that call fails (one bad frame fails all), one by one,
        and None for each frame the device refuses."""
        if not blobs:
            return []
        tensors = [torch.frombuffer(bytearray(blob), dtype=torch.uint8) for blob in blobs]
        try:
            return list(decode_jpeg(tensors, mode=ImageReadMode.RGB, device=self.device))
        except Exception:  # noqa: BLE001 - find the frame(s) it failed on
            if len(tensors) > 1:
                log.debug("batched device decode failed; decoding its %d frames one by one", len(tensors))
        out: list[torch.Tensor | None] = []
        for tensor in tensors:
            try:
                out.append(decode_jpeg(tensor, mode=ImageReadMode.RGB, device=self.device))
            except Exception as exc:  # noqa: BLE001 - this frame goes to the host decoder
                log.debug("device decode refused a frame: %r", exc)
                out.append(None)
        return out

    def _place(self, slot: torch.Tensor, job: Pending, frame: torch.Tensor) -> bool:
        """Letterbox one decoded frame into its slot (and keep its host frame); False when the
        device gave another size than the header says (the host decoder then decides)."""
        frame = upright(frame, job.header.orientation)
        width, height = job.header.upright
        if tuple(frame.shape) != (3, height, width):
            return False
        letterbox_into(slot, frame, placement(width, height, job.target))
        if job.keep != "none" and job.prepared is not None:
            job.prepared.image = to_host(shrink(frame, job.reduction if job.keep == "evidence" else 1))
        return True

    def _on_host(self, slot: torch.Tensor, job: Pending) -> None:
        """The host path for one frame the device did not decode (counted); an image the host
        cannot read either becomes this frame's error (``invalid_image``), its slot stays grey."""
        self.fallbacks.count("error")
        prepared = job.prepared
        if prepared is None:
            return
        try:
            img = decode_pixels(job.data, job.header, job.reduction)
        except ServiceError as exc:
            prepared.error = exc
            return
        boxed, _ = letterbox(img, job.target, original=job.header.upright)
        slot.copy_(torch.from_numpy(boxed).to(self.device).permute(2, 0, 1))
        if job.keep != "none":
            prepared.image = img

    def feeds(self, detector: Detector) -> bool:
        return detector.backend == "torch" and getattr(detector, "device", None) == self.device

    def to_host(self, batch: torch.Tensor) -> np.ndarray:
        return batch.contiguous().cpu().numpy()


class DeviceDecodeUnavailable(RuntimeError):
    """torchvision cannot decode JPEG on the requested device (no nvJPEG, a build without it)."""
