"""`campusguard serve` with CAMPUSGUARD_DECODE=device (torchvision's decode on this CPU): the decoder
in /health and the log, frames the device refuses answered through the host path and counted,
corrupt ones 400 invalid_image as without it, a good frame beside a bad one unharmed."""

from __future__ import annotations

import io
import re
from concurrent.futures import ThreadPoolExecutor

from PIL import Image

from app import wiring
from app.config import Settings
from tests.support.images import corrupt_huffman


def progressive(data: bytes) -> bytes:
    out = io.BytesIO()
    Image.open(io.BytesIO(data)).save(out, "JPEG", quality=90, progressive=True)
    return out.getvalue()


def fallbacks(metrics: str) -> dict[str, float]:
    pattern = r'campusguard_decode_fallback_total\{reason="(\w+)"\} (\S+)'
    return {reason: float(value) for reason, value in re.findall(pattern, metrics)}


def test_device_decode_end_to_end(server_factory, weights, bus_jpg, zidane_jpg):
    host = wiring.build_pipeline(Settings(_env_file=None, backend="torch", precision="fp32", weights=weights,
                                          imgsz=320, threads=1, decode="cpu"))
    expected = {name: sorted(d.class_name for d in dets)
                for name, dets in zip(("bus", "zidane"), host.detect([bus_jpg, zidane_jpg]), strict=True)}
    host.detector.close()
    server = server_factory(decode="device", max_queue_delay_ms=200)
    with server.client() as client:
        health = client.get("/health").json()
        assert health["decode"]["decoder"] == "device" and health["decode"]["setting"] == "device"
        assert health["decode"]["device"] == "cpu"
        assert "decode for model yolov8n: device (torchvision decode_jpeg on cpu" in server.log()
        assert fallbacks(client.get("/metrics").text) == dict.fromkeys(
            ("progressive", "cmyk", "unsupported", "truncated", "format", "error"), 0.0)

        def post(data: bytes):
            return client.post("/detect", content=data, headers={"Content-Type": "image/jpeg"})

        # a corrupt frame and two good ones, batched together (the queue waits 200 ms to fill)
        with ThreadPoolExecutor(3) as pool:
            bad, bus, zidane = pool.map(post, [corrupt_huffman(bus_jpg), bus_jpg, zidane_jpg])
        assert bad.status_code == 400 and bad.json()["error"] == "invalid_image"
        assert sorted(d["class_name"] for d in bus.json()["detections"]) == expected["bus"]
        assert sorted(d["class_name"] for d in zidane.json()["detections"]) == expected["zidane"]
        assert (bus.json()["width"], bus.json()["height"]) == (810, 1080)
        assert post(bus_jpg[: len(bus_jpg) // 2]).json()["error"] == "invalid_image"
        refused = post(progressive(bus_jpg))
        assert refused.status_code == 200 and sorted(d["class_name"] for d in refused.json()["detections"]) == \
            expected["bus"]
        counted = fallbacks(client.get("/metrics").text)
        assert (counted["error"], counted["truncated"], counted["progressive"]) == (1, 1, 1)
