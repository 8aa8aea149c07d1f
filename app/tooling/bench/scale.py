"""``campusguard bench scale``: the event store and the rules at site scale, measured.

Every figure of the site-scale issue, reproduced on demand: ``GET /events`` latency at a
million events (the default page, each filter, paging to the end by cursor, and the old
``count(*)`` + ``OFFSET`` way beside it), retention with millions of outbox rows while a
writer keeps writing, replay's chunk reads along millions of logged frames (the last chunk
against the first) and its evaluation rate, and rules evaluation in camera-frames/s.
Synthetic data (app/tooling/bench/scale_data.py); PostgreSQL from the throw-away cluster
helper (app/tooling/pgcluster.py) unless ``--db`` names one.
"""

from __future__ import annotations

import datetime as dt
import random
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from sqlalchemy import func, select

from app.rules.store.db import EventStore
from app.rules.store.framelog import decode
from app.rules.store.schema import events_table
from app.tooling.bench.scale_data import RULES, ZONES, camera_ids

Timer = Callable[[], float]


@dataclass
class Timing:
    name: str
    samples_ms: list[float] = field(default_factory=list)
    note: str = ""

    def row(self) -> dict[str, Any]:
        s = sorted(self.samples_ms)
        p95 = s[min(len(s) - 1, int(round(0.95 * (len(s) - 1))))] if s else None
        return {"case": self.name, "n": len(s), "p50_ms": round(statistics.median(s), 2) if s else None,
                "p95_ms": round(p95, 2) if p95 is not None else None, "max_ms": round(s[-1], 2) if s else None,
                "note": self.note}


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    out = fn()
    return (time.perf_counter() - start) * 1e3, out


def event_queries(store: EventStore, cameras: int, days: float, end: dt.datetime, repeats: int = 30,
                  seed: int = 3) -> list[Timing]:
    """GET /events as the repository answers it: each filter, then paging by cursor."""
    rng = random.Random(seed)
    cams = camera_ids(cameras)
    start = end - dt.timedelta(days=days)

    def window() -> dict:
        since = start + dt.timedelta(seconds=rng.random() * (days - 1) * 86_400)
        return {"since": since, "until": since + dt.timedelta(days=1)}

    cases: dict[str, Callable[[], dict]] = {
        "default page": lambda: {},
        "camera": lambda: {"camera_id": rng.choice(cams)},
        "zone": lambda: {"zone": rng.choice(ZONES)},
        "rule": lambda: {"rule": rng.choice(RULES)},
        "acknowledged=false": lambda: {"acknowledged": False},
        "acknowledged=true": lambda: {"acknowledged": True},
        "false_positive=true": lambda: {"false_positive": True},
        "one day": window,
        "camera + one day": lambda: {"camera_id": rng.choice(cams), **window()},
        "camera + zone + unacknowledged": lambda: {"camera_id": rng.choice(cams), "zone": rng.choice(ZONES),
                                                   "acknowledged": False},
    }

    def page(params: Callable[[], dict]) -> Any:
        return store.events.query(limit=50, **params())

    out = []
    for name, params in cases.items():
        timing = Timing(name)
        for _ in range(repeats):
            ms, _page = timed(partial(page, params))
            timing.samples_ms.append(ms)
        out.append(timing)
    out.append(cursor_to_the_end(store, rng.choice(cams)))
    out.append(deep_cursor(store, repeats))
    return out


def cursor_to_the_end(store: EventStore, camera: str) -> Timing:
    """Every page of one camera's events by cursor (50 a page): the last as fast as the first."""
    timing = Timing(f"cursor to the end ({camera})")
    after = None
    while True:
        ms, page = timed(partial(store.events.query, camera_id=camera, limit=50, after=after))
        timing.samples_ms.append(ms)
        if page.next is None:
            break
        after = page.next
    first, last = timing.samples_ms[0], timing.samples_ms[-1]
    timing.note = f"{len(timing.samples_ms)} pages; first {first:.1f} ms, last {last:.1f} ms"
    return timing


def deep_cursor(store: EventStore, repeats: int) -> Timing:
    """A page 90% of the way down the unfiltered list, reached by its cursor."""
    t = events_table.c
    with store.engine.connect() as conn:
        total = conn.execute(select(func.count()).select_from(events_table)).scalar_one()
        row = conn.execute(select(t.started_at, t.id).order_by(t.started_at.desc(), t.id.desc())
                           .offset(int(total * 0.9)).limit(1)).first()
    if row is None:
        raise RuntimeError("deep page by cursor: the event store has no events")
    timing = Timing("deep page by cursor (90%)")
    for _ in range(repeats):
        timing.samples_ms.append(timed(lambda: store.events.query(limit=50, after=(row.started_at, row.id)))[0])
    return timing


def old_way(store: EventStore, repeats: int = 5) -> list[Timing]:
    """Before: a full ``count(*)`` with every page, and OFFSET paging (for the comparison)."""
    t = events_table.c
    out = []
    for name, conds, offset in (("count(*) + first page (before)", [], 0),
                                ("count(*) + acknowledged=false (before)", [t.acknowledged.is_(False)], 0),
                                ("OFFSET 900000 (before)", [], 900_000)):
        timing = Timing(name)
        for _ in range(repeats):
            def query(conds: list[Any] = conds, offset: int = offset) -> None:
                with store.engine.connect() as conn:
                    conn.execute(select(func.count()).select_from(events_table).where(*conds)).scalar_one()
                    conn.execute(select(events_table).where(*conds).order_by(t.started_at.desc(), t.id.desc())
                                 .limit(50).offset(offset)).all()
            timing.samples_ms.append(timed(query)[0])
        out.append(timing)
    return out


def retention(store: EventStore, cutoff: dt.datetime, write: Callable[[int], None]) -> dict[str, Any]:
    """Delete everything that ended before ``cutoff`` while a writer records an event every
    10 ms; events deleted per second, and the writer's latency before and during."""
    latencies: dict[str, list[float]] = {"before": [], "during": []}
    phase = ["before"]
    stop = threading.Event()

    def writer() -> None:
        i = 0
        while not stop.is_set():
            ms, _ = timed(partial(write, i))
            latencies[phase[0]].append(ms)
            i += 1
            time.sleep(0.01)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    time.sleep(2.0)
    phase[0] = "during"
    ms, deleted = timed(lambda: store.events.delete_ended_before(cutoff))
    stop.set()
    thread.join()
    out: dict[str, Any] = {"deleted_events": len(deleted), "seconds": round(ms / 1e3, 2),
                           "events_per_s": round(len(deleted) / (ms / 1e3), 1) if ms else None}
    for name, values in latencies.items():
        s = sorted(values)
        out[f"writer_{name}_p50_ms"] = round(statistics.median(s), 2) if s else None
        out[f"writer_{name}_p95_ms"] = round(s[int(0.95 * (len(s) - 1))], 2) if s else None
        out[f"writer_{name}_max_ms"] = round(s[-1], 2) if s else None
    return out


def replay_reads(store: EventStore, cameras: list[str], since: dt.datetime, until: dt.datetime,
                 chunk: int = 2000, progress: Callable[[int], None] = lambda n: None) -> dict[str, Any]:
    """Read and decode every logged frame of the window in replay's chunks; the first ten
    chunks' time against the last ten, frames/s, and the process's RSS before and after."""
    import psutil

    proc = psutil.Process()
    rss0 = proc.memory_info().rss
    chunks: list[float] = []
    frames = 0
    rows = store.frames.iter(cameras, since, until, chunk=chunk)
    start = time.perf_counter()
    while True:
        t0 = time.perf_counter()
        got = 0
        for row in rows:
            decode(row._mapping)
            got += 1
            if got == chunk:
                break
        if not got:
            break
        chunks.append((time.perf_counter() - t0) * 1e3)
        frames += got
        progress(got)
    seconds = time.perf_counter() - start
    head, tail = chunks[:10], chunks[-10:]
    return {"frames": frames, "chunks": len(chunks), "frames_per_s": round(frames / seconds, 1) if seconds else None,
            "first_chunks_ms": round(statistics.mean(head), 2) if head else None,
            "last_chunks_ms": round(statistics.mean(tail), 2) if tail else None,
            "rss_growth_mb": round((proc.memory_info().rss - rss0) / 2**20, 1)}



def replay_rate(store: EventStore, site, since: dt.datetime, until: dt.datetime, workers: int = 1) -> dict[str, Any]:
    """Replay (the live evaluator over logged frames, app/rules/service/replay.py) of a window in
    ``workers`` processes: frames evaluated per second (worker start-up included)."""
    from app.rules.service.replay import compare

    counted: list[int] = []
    start = time.perf_counter()
    compare(store, site, since, until, on_total=counted.append, workers=workers)
    seconds = time.perf_counter() - start
    frames = counted[0] if counted else 0  # the window and its warm-up margin
    return {"workers": workers, "frames": frames, "seconds": round(seconds, 2),
            "frames_per_s": round(frames / seconds, 1) if seconds else None}
