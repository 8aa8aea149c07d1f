"""Detection latency and admission with the shadow lane on vs off, side by side.

The same engine serves alternating rounds at a fixed request rate: ``off`` (no frame is
offered) and ``on`` (every answered frame is offered to the lane at its sample rate, as the
routes do). Rounds alternate so drift of the machine (other work, thermal) hits both alike.
In-process (no HTTP), so the figures isolate what the lane costs detection.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from app.core.errors import ServiceError
from app.inference.engine import InferenceEngine
from app.inference.pipeline import DetectParams
from app.inference.shadow.lane import NoShadow, ShadowLane


@dataclass(frozen=True)
class Round:
    mode: str
    requests: int
    latencies_ms: list[float]
    rejected: int
    sampled: int
    compared: int
    dropped: int


async def drive(engine: InferenceEngine, lane: ShadowLane | NoShadow, frames: list[bytes], rps: float,
                requests: int, cameras: int = 4) -> tuple[list[float], int]:
    """``requests`` detections at ``rps`` (open loop: arrivals do not wait for answers)."""
    loop = asyncio.get_running_loop()
    params, latencies, rejected = DetectParams(), [], 0

    async def one(i: int) -> None:
        nonlocal rejected
        data = frames[i % len(frames)]
        try:
            result = await engine.detect(data, params)
        except ServiceError:
            rejected += 1
            return
        lane.offer(f"cam-{i % cameras}", data, params, result.detections)
        latencies.append(result.timings_ms["total_ms"])

    start, tasks = loop.time(), []
    for i in range(requests):
        await asyncio.sleep(max(0.0, start + i / rps - loop.time()))
        tasks.append(asyncio.create_task(one(i)))
    await asyncio.gather(*tasks)
    return latencies, rejected


def run_round(engine: InferenceEngine, lane: ShadowLane, mode: str, frames: list[bytes], rps: float,
              requests: int) -> Round:
    before = lane.book.counters()
    latencies, rejected = asyncio.run(drive(engine, lane if mode == "on" else NoShadow(), frames, rps, requests))
    lane.drain(120)
    time.sleep(0.2)
    after = lane.book.counters()
    return Round(mode, requests, latencies, rejected, after[1] - before[1],
                 sum(after[0].values()) - sum(before[0].values()), sum(after[2].values()) - sum(before[2].values()))


def per_round(rounds: list[Round]) -> list[dict]:
    """Each round's own p50/p95, in the order run: their spread within one mode is the
    machine's noise, the yardstick for the on/off ratios of ``summarize``."""
    out = []
    for i, r in enumerate(rounds):
        lat = np.asarray(r.latencies_ms)
        out.append({"round": i + 1, "mode": r.mode, "requests": r.requests,
                    "p50_ms": float(np.percentile(lat, 50)) if lat.size else None,
                    "p95_ms": float(np.percentile(lat, 95)) if lat.size else None,
                    "admitted": (r.requests - r.rejected) / r.requests, "sampled": r.sampled,
                    "compared": r.compared, "dropped": r.dropped})
    return out


def spread(rounds: list[dict], key: str) -> str:
    """``off 61.2-70.3, on 60.9-68.8``: the range of one figure over each mode's rounds."""
    parts = []
    for mode in ("off", "on"):
        values = [r[key] for r in rounds if r["mode"] == mode and r[key] is not None]
        if values:
            parts.append(f"{mode} {min(values):.1f}-{max(values):.1f}")
    return ", ".join(parts)


def summarize(rounds: list[Round]) -> list[dict]:
    rows: list[dict[str, Any]] = []
    for mode in ("off", "on"):
        mine = [r for r in rounds if r.mode == mode]
        lat = np.asarray([x for r in mine for x in r.latencies_ms])
        total = sum(r.requests for r in mine)
        rows.append({"mode": mode, "requests": total, "p50_ms": float(np.percentile(lat, 50)) if lat.size else None,
                     "p95_ms": float(np.percentile(lat, 95)) if lat.size else None,
                     "admitted": (total - sum(r.rejected for r in mine)) / total if total else None,
                     "sampled": sum(r.sampled for r in mine), "compared": sum(r.compared for r in mine),
                     "dropped": sum(r.dropped for r in mine)})
    off, on = rows
    if off["p50_ms"] and on["p50_ms"]:
        on["p50_vs_off"] = on["p50_ms"] / off["p50_ms"]
        on["p95_vs_off"] = on["p95_ms"] / off["p95_ms"]
    return rows
