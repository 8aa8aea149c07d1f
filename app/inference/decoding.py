"""Which decoder turns a POSTed JPEG into the model's input, what it refuses, and the count of refusals.

Two decoders exist: the host's (OpenCV over libjpeg-turbo with DCT scaling, then the letterbox
in numpy: ``app/inference/vision``) and the device's (torchvision's ``decode_jpeg`` on the
model's device, nvJPEG on NVIDIA, then the letterbox in torch: ``app/inference/device_decode.py``).
The composition root picks one per model at startup (``CAMPUSGUARD_DECODE``) and it never
changes per request; what the device decoder does not take (a progressive, CMYK, 12-bit or
truncated JPEG, another format, or a frame its decode call fails on) is decoded on the host for
that frame alone and counted here by reason, so an operator sees how much of the traffic
misses the device (``campusguard_decode_fallback_total``).

This module imports neither torch nor torchvision: a CPU node never loads them for decoding.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily
from prometheus_client.registry import Collector

from app.core.metrics import NAMESPACE, Metrics

# Why a frame was decoded on the host although the device decoder is on.
FALLBACK_REASONS = ("progressive", "cmyk", "unsupported", "truncated", "format", "error")
_PROGRESSIVE = frozenset({0xC2, 0xC6, 0xCA, 0xCE})  # SOF2/6/10/14: progressive (Huffman or arithmetic)
_SEQUENTIAL = frozenset({0xC0, 0xC1})  # baseline and extended sequential, Huffman: what nvJPEG's engines take
_SOF = frozenset(range(0xC0, 0xD0)) - {0xC4, 0xC8, 0xCC}  # DHT, JPG and DAC share the range


@dataclass(frozen=True, slots=True)
class DecoderInfo:
    """What decodes this model's JPEGs, as /health, the console and the startup log show it."""

    setting: str  # CAMPUSGUARD_DECODE as written: auto, cpu or device
    decoder: str  # what runs: cpu (OpenCV on the host) or device (torchvision on ``device``)
    device: str  # where the pixels are decoded: cpu, cuda:0, ...
    reason: str  # why (auto's verdict, or "set explicitly")

    def as_dict(self) -> dict[str, str]:
        return {"setting": self.setting, "decoder": self.decoder, "device": self.device, "reason": self.reason}

    def describe(self) -> str:
        library = "torchvision decode_jpeg" if self.decoder == "device" else "OpenCV (libjpeg-turbo)"
        return f"{self.decoder} ({library} on {self.device}; {self.reason})"


def jpeg_refusal(data: bytes) -> str | None:
    """Why a device decoder would not take this JPEG, read from its frame header (SOF) without
    decoding: ``progressive``, ``cmyk`` (4 components, Adobe CMYK or YCCK), ``unsupported``
    (lossless, arithmetic coding, 12-bit, no frame header before the scan) or ``truncated``
    (no end-of-image marker); None for a baseline or extended 8-bit grey or colour JPEG.

    nvJPEG's hardware engines decode baseline JPEG only; the rest would fail a whole batched
    call (or take a slow path), so they go to the host before they reach the queue.
    """
    if b"\xff\xd9" not in data[-64:]:  # the host decoder refuses these as truncated (decode.py)
        return "truncated"
    i, end = 2, len(data)
    while i + 4 <= end:
        if data[i] != 0xFF:
            return "unsupported"  # not at a marker: leave it to the host decoder's verdict
        marker = data[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD8:  # TEM, RSTn, SOI carry no length
            i += 2
            continue
        if marker == 0xDA:  # a scan before any frame header
            return "unsupported"
        length = int.from_bytes(data[i + 2:i + 4], "big")
        if marker in _SOF:
            if i + 10 > end:
                return "unsupported"
            if marker in _PROGRESSIVE:
                return "progressive"
            if marker not in _SEQUENTIAL or data[i + 4] != 8:
                return "unsupported"
            components = data[i + 9]
            return "cmyk" if components == 4 else None if components in (1, 3) else "unsupported"
        i += 2 + length
    return "unsupported"


class FallbackBook:
    """Frames a device decoder handed to the host, by reason (thread-safe: the request threads
    count header refusals, the engine's lane counts failed decode calls)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def count(self, reason: str) -> None:
        with self._lock:
            self._counts[reason] += 1

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return {reason: self._counts[reason] for reason in FALLBACK_REASONS}


class DecodeSeries(Collector):
    """``campusguard_decode_fallback_total{reason}``: the books of every model's decoder, summed at
    scrape time; every reason is exported at 0 from the first scrape (an alert can rate() it)."""

    @classmethod
    def of(cls, metrics: Metrics) -> DecodeSeries:
        return metrics.part(cls)

    def __init__(self, metrics: Metrics) -> None:
        self._books: list[FallbackBook] = []
        self._lock = threading.Lock()
        metrics.registry.register(self)

    def track(self, book: FallbackBook) -> None:
        """Count ``book`` from now on (a model's decoder; a swapped-out model's counts stay)."""
        with self._lock:
            if all(b is not book for b in self._books):
                self._books.append(book)

    def collect(self) -> Iterator[CounterMetricFamily]:
        family = CounterMetricFamily(f"{NAMESPACE}_decode_fallback", "JPEGs the device decoder handed to the host "
                                     "decoder, by reason (CAMPUSGUARD_DECODE=device or auto on a GPU)",
                                     labels=["reason"])
        with self._lock:
            books = list(self._books)
        totals: Counter[str] = Counter()
        for book in books:
            totals.update(book.snapshot())
        for reason in FALLBACK_REASONS:
            family.add_metric([reason], totals[reason])
        yield family
