"""The device decoder (app/inference/device_decode.py) on this machine's CPU: torchvision's decode and
the torch letterbox against the host path (OpenCV), on real images and the real model, and what
falls back to the host (counted) or fails (invalid_image) frame by frame."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image
from prometheus_client import generate_latest

from app import wiring
from app.config import Settings
from app.core.errors import ConfigError, InvalidImage
from app.core.metrics import Metrics
from app.core.types import DeviceInfo
from app.inference.accuracy import upscaled
from app.inference.decoding import jpeg_refusal
from app.inference.pipeline import DecodePolicy, DetectParams, Pending, Pipeline
from app.inference.vision.decode import image_files
from app.wiring.decoding import choose_decoder
from tests.support.fakes import FakeDetector
from tests.support.images import corrupt_huffman, encode, noise_image


def iou(a, b) -> float:
    w = max(0.0, min(a.x2, b.x2) - max(a.x1, b.x1))
    h = max(0.0, min(a.y2, b.y2) - max(a.y1, b.y1))
    inter = w * h
    return inter / ((a.x2 - a.x1) * (a.y2 - a.y1) + (b.x2 - b.x1) * (b.y2 - b.y1) - inter)


def settings_for(weights: Path, decode: str) -> Settings:
    return Settings(_env_file=None, backend="torch", precision="fp32", weights=weights, imgsz=320, threads=1,
                    decode=decode)


@pytest.fixture(scope="module")
def detector(weights):
    detector = wiring.load_detector(settings_for(weights, "cpu"))
    yield detector
    detector.close()


@pytest.fixture(scope="module")
def pipelines(weights, detector):
    """The real model behind two pipelines: the device decoder (on the CPU) and the host's."""
    device = wiring.build_pipeline(settings_for(weights, "device"), detector)
    host = wiring.build_pipeline(settings_for(weights, "cpu"), detector)
    assert device.decoder.info.decoder == "device" and host.decoder.info.decoder == "cpu"
    return device, host


def sample_jpegs(bus_jpg: bytes, zidane_jpg: bytes, dataset: Path) -> dict[str, bytes]:
    """Ultralytics' two, four of coco-val128, one of those up-scaled to 1920 px wide (1920x1278, as
    `parity --upscale 1920` makes them) and zidane.jpg as a 1080p camera frame (q90)."""
    coco = image_files(dataset / "images")[:4]
    camera = cv2.resize(cv2.imdecode(np.frombuffer(zidane_jpg, np.uint8), cv2.IMREAD_COLOR), (1920, 1080))
    return {"bus": bus_jpg, "zidane": zidane_jpg, "1920x1278": upscaled(1920)(coco[0].read_bytes()),
            "1080p": encode(camera, IMWRITE_JPEG_QUALITY=90)} | {p.name: p.read_bytes() for p in coco}


def pil_jpeg(data: bytes, mode: str = "RGB", **params) -> bytes:
    out = io.BytesIO()
    Image.open(io.BytesIO(data)).convert(mode).save(out, "JPEG", quality=90, **params)
    return out.getvalue()


def test_jpeg_refusal_reads_the_frame_header(bus_jpg):
    assert jpeg_refusal(bus_jpg) is None
    assert jpeg_refusal(pil_jpeg(bus_jpg, "L")) is None  # grey: one component
    assert jpeg_refusal(pil_jpeg(bus_jpg, progressive=True)) == "progressive"
    assert jpeg_refusal(pil_jpeg(bus_jpg, "CMYK")) == "cmyk"
    assert jpeg_refusal(bus_jpg[: len(bus_jpg) // 2]) == "truncated"
    assert jpeg_refusal(b"\xff\xd8\xff\xda\x00\x02" + b"\x00" * 70 + b"\xff\xd9") == "unsupported"  # scan first


def test_same_geometry_and_close_pixels_as_the_host_path(pipelines, weights, detector, bus_jpg, zidane_jpg,
                                                         dataset):
    """Against the host's full decode (what the device does: a full decode, then the same shrink)
    the letterboxed input differs by rounding alone where the area step divides the frame exactly
    (1080p, 4K, 720p); elsewhere (1278 rows by 4) torch's area windows round differently from
    OpenCV's fractional ones, a little. The kept evidence frame is the size the host's reduced
    decode keeps, and close to it (DCT scaling against an area average)."""
    device, reduced = pipelines
    full = wiring.build_pipeline(settings_for(weights, "cpu").model_copy(update={"decode_reduce": False}), detector)
    for name, data in sample_jpegs(bus_jpg, zidane_jpg, dataset).items():
        for keep in ("none", "evidence", "full"):
            on_device, on_host = device.prepare(data, keep=keep), full.prepare(data, keep=keep)
            assert isinstance(on_device.letterboxed, Pending)
            assert on_device.letterbox == on_host.letterbox and on_device.shape == on_host.shape, name
            boxed = device.decoder.letterbox_batch([on_device.letterboxed]).numpy()[0]
            assert boxed.shape == on_host.letterboxed.shape
            diff = np.abs(boxed.astype(np.int16) - on_host.letterboxed.astype(np.int16))
            exact = name != "1920x1278"
            assert diff.mean() < (0.25 if exact else 0.5) and (diff.max() <= 2 or not exact), (name, diff.mean())
            if keep == "none":
                assert on_device.image is None
                continue
            kept = reduced.prepare(data, keep=keep).image
            assert on_device.image.shape == kept.shape, (name, keep)
            assert np.abs(on_device.image.astype(np.int16) - kept.astype(np.int16)).mean() < 2.0, (name, keep)
    assert device.prepare(sample_jpegs(bus_jpg, zidane_jpg, dataset)["1080p"], keep="evidence").reduction == 2


def test_exif_orientation_is_applied_on_the_device(pipelines, zidane_jpg):
    device, host = pipelines
    img = Image.open(io.BytesIO(zidane_jpg))
    exif = img.getexif()
    exif[0x0112] = 6  # stored sideways: turn clockwise to view
    out = io.BytesIO()
    img.save(out, "JPEG", quality=90, exif=exif.tobytes())
    data = out.getvalue()
    on_device, on_host = device.prepare(data, keep="full"), host.prepare(data, keep="full")
    assert on_device.letterbox == on_host.letterbox and on_host.letterbox.height == 1280
    device.infer([on_device.letterboxed])
    np.testing.assert_array_equal(on_device.image.shape, on_host.image.shape)
    assert np.abs(on_device.image.astype(np.int16) - on_host.image.astype(np.int16)).mean() < 1.0


def test_detections_agree_with_the_host_path_in_one_batch(pipelines, bus_jpg, zidane_jpg, dataset):
    device, host = pipelines
    frames = list(sample_jpegs(bus_jpg, zidane_jpg, dataset).values())
    found, expected = device.detect(frames, batch_size=8), host.detect(frames, batch_size=8)
    for got, want in zip(found, expected, strict=True):
        strong = [d for d in want if d.confidence > 0.5]  # boxes near the threshold may flip either way
        assert strong
        for d in strong:
            best = max(got, key=lambda g: iou(g, d) if g.class_id == d.class_id else 0.0)
            assert best.class_id == d.class_id and iou(best, d) > 0.9, (d, best)


def test_refused_jpegs_go_to_the_host_path_and_are_counted(pipelines, bus_jpg):
    device, host = pipelines
    before = device.decoder.fallbacks.snapshot()
    for variant, reason in ((pil_jpeg(bus_jpg, progressive=True), "progressive"), (pil_jpeg(bus_jpg, "CMYK"), "cmyk")):
        prepared = device.prepare(variant)
        assert isinstance(prepared.letterboxed, np.ndarray)  # decoded on the host, before the queue
        assert [d.class_name for d in device.detect([variant])[0]] == [d.class_name for d in host.detect([variant])[0]]
        assert device.decoder.fallbacks.snapshot()[reason] == before[reason] + 2, reason
    png = encode(noise_image(64, 48), ".png")
    assert isinstance(device.prepare(png).letterboxed, np.ndarray)
    assert device.decoder.fallbacks.snapshot()["format"] == before["format"] + 1


def test_a_failed_device_decode_falls_back_frame_by_frame(pipelines, bus_jpg, zidane_jpg, monkeypatch):
    """One frame the device call fails on: the batch is decoded one by one, that frame on the host."""
    import app.inference.device_decode as device_decode

    device, host = pipelines
    real = device_decode.decode_jpeg
    sizes = {len(bus_jpg)}  # the device "refuses" bus.jpg

    def refusing(data, **kwargs):
        blobs = data if isinstance(data, list) else [data]
        if any(len(b) in sizes for b in blobs):
            raise RuntimeError("nvjpeg: status 6")
        return real(data, **kwargs)

    monkeypatch.setattr(device_decode, "decode_jpeg", refusing)
    before = device.decoder.fallbacks.snapshot()["error"]
    prepared = [device.prepare(bus_jpg, keep="evidence"), device.prepare(zidane_jpg, keep="evidence")]
    device.infer([p.letterboxed for p in prepared])
    assert device.decoder.fallbacks.snapshot()["error"] == before + 1
    assert prepared[0].error is None and prepared[0].image.shape == host.prepare(bus_jpg, keep="evidence").image.shape
    assert [d.class_name for d in device.detect([bus_jpg])[0]] == [d.class_name for d in host.detect([bus_jpg])[0]]


def test_a_corrupt_jpeg_fails_alone_with_invalid_image(pipelines, bus_jpg, zidane_jpg):
    device, _ = pipelines
    broken = corrupt_huffman(bus_jpg)
    prepared = [device.prepare(broken), device.prepare(zidane_jpg)]
    assert isinstance(prepared[0].letterboxed, Pending)  # its header looks fine
    out = device.infer([p.letterboxed for p in prepared])
    assert isinstance(prepared[0].error, InvalidImage) and prepared[1].error is None and len(out[1]) > 0
    with pytest.raises(InvalidImage):
        device.detect([broken])
    with pytest.raises(InvalidImage):  # truncated: refused from the header, the host says why
        device.prepare(bus_jpg[: len(bus_jpg) // 2])


def test_a_detector_without_device_input_gets_the_batch_on_the_host(bus_jpg):
    """ONNX Runtime or OpenVINO on a GPU node: decoded on the device, the uint8 batch comes back."""
    fake = FakeDetector(imgsz=64, check_input=True)
    pipeline = Pipeline(fake, 0, decode=DecodePolicy(), decoder=choose_decoder("device", fake))
    prepared = pipeline.prepare(bus_jpg)
    assert isinstance(prepared.letterboxed, Pending)
    assert len(pipeline.infer([prepared.letterboxed, prepared.letterboxed])) == 2
    assert fake.batches == [(2, 3, 64, 64)]


class _GpuModel:
    """A detector that says it runs on a GPU this machine does not have (only device_info is read)."""

    model_name = "fake"

    def __init__(self, platform: str) -> None:
        self.platform = platform

    def device_info(self) -> DeviceInfo:
        return DeviceInfo(device="cuda:0", name="a GPU", platform=self.platform, index=0)


def test_auto_decodes_on_the_host_for_a_cpu_model_and_device_only_where_it_runs():
    cpu_model = FakeDetector()
    auto = choose_decoder("auto", cpu_model)
    assert (auto.info.decoder, auto.info.setting) == ("cpu", "auto") and "CPU" in auto.info.reason
    assert choose_decoder("cpu", _GpuModel("cuda")).info.decoder == "cpu"
    explicit = choose_decoder("device", cpu_model)  # selectable on a CPU model: tests and parity
    assert (explicit.info.decoder, explicit.info.device) == ("device", "cpu")
    # a GPU torchvision cannot decode on (none here): auto says why and stays on the host ...
    for platform in ("cuda", "rocm"):
        fallback = choose_decoder("auto", _GpuModel(platform))
        assert fallback.info.decoder == "cpu" and "cuda:0" in fallback.info.reason
    # ... and an explicit device setting stops the start instead of decoding elsewhere
    with pytest.raises(ConfigError, match="CAMPUSGUARD_DECODE=device"):
        choose_decoder("device", _GpuModel("cuda"))


def test_through_the_engine_the_kept_frame_and_timings_come_back(pipelines, bus_jpg):
    """The engine's request path: the lane decodes, the request gets the evidence frame it asked
    for, the decode timing, and a corrupt frame's own invalid_image; the metric counts it."""
    device, host = pipelines
    metrics = Metrics()
    engine = wiring.build_engine(settings_for(Path("unused.pt"), "device"), device, metrics)
    engine.start()
    engine.mark_ready()

    async def run():
        return await asyncio.gather(engine.detect(bus_jpg, DetectParams(), "evidence"),
                                    engine.detect(corrupt_huffman(bus_jpg), DetectParams()), return_exceptions=True)

    try:
        before = device.decoder.fallbacks.snapshot()["error"]
        good, bad = asyncio.run(run())
    finally:
        engine.begin_drain()
        engine.stop()
    assert isinstance(bad, InvalidImage)
    assert good.image is not None and good.image.shape == (1080, 810, 3) and good.timings_ms["decode_ms"] > 0
    assert (good.width, good.height) == (810, 1080)
    assert sorted(d.class_name for d in good.detections) == sorted(d.class_name for d in host.detect([bus_jpg])[0])
    text = generate_latest(metrics.registry).decode()
    assert f'campusguard_decode_fallback_total{{reason="error"}} {float(before + 1)}' in text
