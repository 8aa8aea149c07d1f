"""Auth, body limits and memory under a long run, on the production app in-process over
the fake detector (tests/support/inprocess.py): HTTP behaviour, no model needed. Moved here
from the real-server reliability tests; the real model's soak is `campusguard soak`."""

from __future__ import annotations

import asyncio
import logging

import httpx
import numpy as np
import psutil
import pytest

from app.config import Settings
from tests.support.images import encode, noise_image
from tests.support.inprocess import IMGSZ, inprocess_app

JPEG = {"content-type": "image/jpeg"}


def settings(**overrides) -> Settings:
    return Settings(**{"_env_file": None, "imgsz": IMGSZ, "threads": 1, "preprocess_workers": 1, "warmup_iters": 0,
                       **overrides})


@pytest.mark.parametrize("open_probes", [True, False])
def test_auth_matrix(bus_jpg, open_probes, caplog):
    public = "/health/live,/health/ready,/metrics" if open_probes else "/health/ready"
    routes = [
        ("/detect", dict(content=bus_jpg, headers=dict(JPEG))),
        ("/detect/batch", dict(files=[("images", ("a.jpg", bus_jpg, "image/jpeg"))])),
        ("/v1/vision/detection", dict(files={"image": ("a.jpg", bus_jpg, "image/jpeg")})),
    ]
    caplog.set_level(logging.DEBUG)
    with inprocess_app(settings(api_keys="key-old,key-new", public_routes=public)) as env:
        c = env.client
        for path, kwargs in routes:
            kwargs.setdefault("headers", {})
            assert c.post(path, **kwargs).status_code == 401, path
            for key, expected in (("wrong", 403), ("key-old", 200), ("key-new", 200)):
                headers = {**kwargs["headers"], "x-api-key": key}
                r = c.post(path, **{**kwargs, "headers": headers})
                assert r.status_code == expected, (path, key, r.text)
        ds = c.post("/v1/vision/detection", files={"image": ("a.jpg", bus_jpg, "image/jpeg")},
                    data={"api_key": "key-new"})
        assert ds.status_code == 200 and ds.json()["success"] is True
        wrong = c.post("/v1/vision/detection", files={"image": ("a.jpg", bus_jpg, "image/jpeg")},
                       data={"api_key": "nope"})
        assert wrong.status_code == 403 and wrong.json()["success"] is False
        for path in ("/health/live", "/metrics"):
            assert c.get(path).status_code == (200 if open_probes else 401)
            assert c.get(path, headers={"x-api-key": "key-old"}).status_code == 200
    assert caplog.records and not any("key-old" in r.getMessage() or "key-new" in r.getMessage()
                                      for r in caplog.records)


def test_batch_over_image_limit_and_body_limits(bus_jpg):
    small = encode(noise_image(64, 64))
    with inprocess_app(settings(max_batch_images=3, max_body_bytes=2_000_000)) as env:
        c = env.client
        over = c.post("/detect/batch", files=[("images", (f"{i}.jpg", small, "image/jpeg")) for i in range(4)])
        at = c.post("/detect/batch", files=[("images", (f"{i}.jpg", small, "image/jpeg")) for i in range(3)])
        empty = c.post("/detect/batch", files=[("other", ("a.txt", b"x", "text/plain"))])
        big = c.post("/detect", content=bus_jpg * 40, headers=JPEG)

        def gen():
            for _ in range(40):
                yield bus_jpg

        big_chunked = c.post("/detect", content=gen(), headers=JPEG)
        ok = c.post("/detect", content=bus_jpg, headers=JPEG)
    assert over.status_code == 413 and over.json()["error"] == "too_many_images"
    assert at.status_code == 200 and [i["ok"] for i in at.json()["results"]] == [True] * 3
    assert empty.status_code == 422 and empty.json()["error"] == "missing_image"
    assert big.status_code == 413 and big_chunked.status_code == 413
    assert ok.status_code == 200


@pytest.mark.slow  # 1,000 requests up to 4K: 40 s alone
def test_soak_rss_stays_flat():
    """1,000 mixed-size JPEG/PNG requests (64x64 .. 4K JPEG) through the whole HTTP path and the
    engine (decode, letterbox, batching; the fake detector instead of the model): RSS growth
    after warm-up < 30 MB. The model-backed soak is a benchmark: `campusguard soak`."""
    rng = np.random.default_rng(7)
    sizes = [(64, 64), (320, 240), (640, 480), (1280, 720), (1920, 1080), (3840, 2160), (333, 777), (2000, 1500)]
    pool = []
    for i, (w, h) in enumerate(sizes):
        img = noise_image(w, h, seed=i)
        pool.append(encode(img, ".jpg"))
        if w * h < 3_000_000:  # a 4K noise PNG is 25 MB of decoding per request: JPEG only there
            pool.append(encode(img, ".png", IMWRITE_PNG_COMPRESSION=1))
    proc = psutil.Process()
    with inprocess_app(settings(max_batch_size=8, cache_clear_every=200, queue_size=64, request_timeout_s=120,
                                preprocess_workers=2)) as env:
        transport = httpx.ASGITransport(app=env.app)

        async def run(n: int) -> list[int]:
            codes: list[int] = []
            sem = asyncio.Semaphore(8)
            async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=120) as c:
                async def one(i: int) -> None:
                    async with sem:
                        payload = pool[int(rng.integers(len(pool)))]
                        kind = "image/png" if payload[:4] == b"\x89PNG" else "image/jpeg"
                        r = await c.post("/detect", content=payload, headers={"content-type": kind})
                        codes.append(r.status_code)

                await asyncio.gather(*(one(i) for i in range(n)))
            return codes

        warm = asyncio.run(run(100))
        assert set(warm) == {200}
        before = proc.memory_info().rss
        codes = asyncio.run(run(1000))
        after = proc.memory_info().rss
    assert codes.count(200) == 1000, {c: codes.count(c) for c in set(codes)}
    growth_mb = (after - before) / 2**20
    print(f"soak: RSS {before / 2**20:.1f} MB -> {after / 2**20:.1f} MB ({growth_mb:+.1f} MB over 1000 requests)")
    assert growth_mb < 30
