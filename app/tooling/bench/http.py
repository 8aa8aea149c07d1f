"""The HTTP side of loadtest and soak: httpx's async client, N workers, one shared plan.

No hand-rolled HTTP: requests are httpx multipart posts (field ``image``) or raw
``image/jpeg`` bodies. Each worker takes the next payload index from a shared counter
until the request budget or the deadline is reached, so ``concurrency`` is exactly the
number of requests in flight.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from app.inference.vision.decode import image_files
from app.tooling.bench.prom import Scrape, parse_metrics

JPEG_SUFFIXES = frozenset({".jpg", ".jpeg"})  # the load generator posts image/jpeg


@dataclass
class Result:
    index: int
    status: int  # 0: transport error (connect refused, timeout, reset)
    latency_ms: float
    started: float  # perf_counter at send
    error: str = ""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@dataclass
class LevelOutcome:
    results: list[Result] = field(default_factory=list)
    seconds: float = 0.0


def load_jpegs(folder: Path, limit: int | None = None) -> list[bytes]:
    """The bytes of the JPEG files in ``folder`` (sorted by name)."""
    from app.core.errors import ConfigError

    paths = image_files(folder, JPEG_SUFFIXES)
    if not paths:
        raise ConfigError(f"no JPEG files found in {folder}")
    return [p.read_bytes() for p in paths[:limit]]


def headers(api_key: str | None) -> dict[str, str]:
    return {"X-API-Key": api_key} if api_key else {}


def make_client(url: str, concurrency: int, timeout: float, api_key: str | None) -> httpx.AsyncClient:
    limits = httpx.Limits(max_connections=concurrency + 2, max_keepalive_connections=concurrency + 2)
    return httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits, headers=headers(api_key))


async def post_image(client: httpx.AsyncClient, data: bytes, raw_body: bool, path: str = "/detect") -> httpx.Response:
    if raw_body:
        return await client.post(path, content=data, headers={"Content-Type": "image/jpeg"})
    return await client.post(path, files={"image": ("frame.jpg", data, "image/jpeg")})


async def drive(client: httpx.AsyncClient, payloads: Sequence[bytes], concurrency: int, *,
                requests: int | None = None, duration: float | None = None, raw_body: bool = False,
                start_index: int = 0, on_result: Callable[[Result], None] | None = None) -> LevelOutcome:
    """Keep ``concurrency`` requests in flight until ``requests`` were sent or ``duration``
    seconds passed (whichever is given; both: the first reached)."""
    if requests is None and duration is None:
        raise ValueError("give requests or duration")
    outcome = LevelOutcome()
    counter = iter(range(start_index, start_index + (requests if requests is not None else 1 << 62)))
    start = time.perf_counter()
    deadline = start + duration if duration is not None else float("inf")

    async def worker() -> None:
        for index in counter:
            if time.perf_counter() >= deadline:
                return
            data = payloads[index % len(payloads)]
            t0 = time.perf_counter()
            try:
                response = await post_image(client, data, raw_body)
                await response.aread()
                result = Result(index, response.status_code, (time.perf_counter() - t0) * 1e3, t0,
                                "" if response.is_success else response.text[:200])
            except httpx.HTTPError as exc:
                result = Result(index, 0, (time.perf_counter() - t0) * 1e3, t0, f"{type(exc).__name__}: {exc}"[:200])
            outcome.results.append(result)
            if on_result is not None:
                on_result(result)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    outcome.seconds = time.perf_counter() - start
    return outcome


async def scrape(client: httpx.AsyncClient) -> Scrape | None:
    """Parse GET /metrics, or None when the server does not answer it."""
    try:
        response = await client.get("/metrics")
    except httpx.HTTPError:
        return None
    if not response.is_success:
        return None
    return parse_metrics(response.text)


async def wait_ready(client: httpx.AsyncClient, timeout: float) -> None:
    from app.core.errors import ServiceError

    deadline = time.monotonic() + timeout
    last = ""
    while time.monotonic() < deadline:
        try:
            response = await client.get("/health/ready")
            if response.status_code == 200:
                return
            last = f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            last = f"{type(exc).__name__}: {exc}"
        await asyncio.sleep(0.5)
    raise ServiceError(f"server at {client.base_url} not ready after {timeout:.0f}s ({last})")
