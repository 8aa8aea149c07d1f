"""The fleet writer: every ``interval_s`` one transaction puts this replica's camera state into
the shared store (app/rules/store/fleet.py), never one write per frame.

Each tick writes the replica's heartbeat, the rows of the cameras whose state changed since
the last successful tick (status, last frame, open events, view checks, stream), a small JPEG
of a camera's newest frame at most every ``frame_interval_s``, and the line crossings counted
since. A failed tick (store outage) is logged once; its crossings stay queued and every row
is written again on the next good one.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import cv2

from app.core.background import Periodic
from app.core.timeutil import utcnow
from app.rules.evidence.latest import LatestFrames
from app.rules.logic.counts import CrossingCounts
from app.rules.service.orphans import OrphanSweeper
from app.rules.store.errors import describe, is_outage
from app.rules.store.fleet import Crossing, FleetRepo, SharedFrame

log = logging.getLogger("campusguard.rules.fleet")


@dataclass(frozen=True, slots=True)
class FleetOptions:
    replica_id: str = "replica"
    interval_s: float = 1.0  # how often the shared rows are written (0: never; single process only)
    stale_after_s: float = 10.0  # an owner silent this long: its rows are shown as stale
    frame_interval_s: float = 3.0  # a camera's shared frame at most this often (0: frames are not shared)
    frame_width: int = 640  # the shared frame's width at most (px)
    retain_days: float = 30.0  # crossings are kept as long as events (retention)
    orphan_after_s: float = 120.0  # a replica silent this long: a live one ends its open events (0: never)


LocalDocs = Callable[[], list[dict[str, Any]]]


def signature(doc: dict[str, Any]) -> str:
    """What a row holds, to tell a changed camera from an unchanged one."""
    return json.dumps([doc["status"], doc.get("last_frame_at"), doc.get("last_seen_at"), doc.get("open_events"),
                       doc.get("view"), doc.get("source")], sort_keys=True, default=str)


def thumbnail(rgb, max_width: int, quality: int = 75) -> bytes:
    """A JPEG of ``rgb`` at most ``max_width`` wide (the console's tile and editor size)."""
    h, w = rgb.shape[:2]
    if w > max_width:
        rgb = cv2.resize(rgb, (max_width, max(1, round(h * max_width / w))), interpolation=cv2.INTER_AREA)
    ok, buf = cv2.imencode(".jpg", cv2.cvtColor(rgb, cv2.COLOR_RGB2BGR), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:  # pragma: no cover - encoding an in-memory uint8 image does not fail
        raise RuntimeError("JPEG encoding failed")
    return buf.tobytes()


class FleetWriter:
    def __init__(self, options: FleetOptions, repo: FleetRepo, local_docs: LocalDocs, latest: LatestFrames,
                 crossings: CrossingCounts, store_up: Callable[[], bool] = lambda: True, *,
                 sources: Callable[[], dict[str, dict[str, Any]]] = dict,
                 sweeper: OrphanSweeper | None = None) -> None:
        self.options = options
        self.repo = repo
        self.local_docs = local_docs
        self.latest = latest
        self.crossings = crossings
        self.store_up = store_up
        self.sources = sources  # the streams' state (app/core/sources.py), shared through the fleet rows
        self.started_at = utcnow()
        self.last_ok: dt.datetime | None = None
        self._written: dict[str, str] = {}  # camera id -> signature of its last written row
        self._frames: dict[str, tuple[dt.datetime, dt.datetime]] = {}  # camera id -> (frame time, written at)
        self._failing = False
        self.lock = threading.Lock()  # held while a batch commits (fleet.py counts under it)
        self.sweeper = sweeper  # a gone replica's open events (service/orphans.py); None in tools and tests
        self._job = Periodic("fleet-writer", self.tick, options.interval_s, on_error=self._error)

    def start(self) -> None:
        self._job.start()

    def stop(self) -> None:
        self._job.stop()
        if self.options.interval_s > 0 and self.store_up():
            try:
                self.tick()  # the last state and crossings before the process goes
            except Exception as exc:
                log.warning("fleet state: the last write failed: %s", describe(exc))

    def tick(self, now: dt.datetime | None = None) -> int:
        """One batch: heartbeat, changed rows, due frames, new crossings; how many rows changed."""
        if not self.store_up():
            return 0  # the event writer is retrying the connection; nothing would get through
        now = now or utcnow()
        sources = self.sources()
        states: list[dict[str, Any]] = []
        marks: dict[str, str] = {}
        for doc in self.local_docs():
            if doc["status"] == "never_seen" or doc.get("last_seen_at") is None:
                continue
            doc = {**doc, "source": sources.get(doc["id"])}
            mark = signature(doc)
            if self._written.get(doc["id"]) == mark:
                continue
            marks[doc["id"]] = mark
            states.append({"camera_id": doc["id"], "owner": self.options.replica_id, "status": doc["status"],
                           "last_frame_at": doc.get("last_frame_at"), "last_seen_at": doc["last_seen_at"],
                           "open_events": json.loads(json.dumps(doc.get("open_events") or [], default=str)),
                           "view": json.loads(json.dumps(doc.get("view"), default=str)),
                           "source": json.loads(json.dumps(doc["source"], default=str)), "updated_at": now})
        frames = self._due_frames(now)
        with self.lock:
            crossings = [Crossing(*row) for row in self.crossings.take()]
        with self.lock:
            try:
                self.repo.publish(self.options.replica_id, self.started_at, now, states, frames, crossings)
            except Exception:
                self.crossings.failed()
                self._written.clear()
                for f in frames:
                    self._frames.pop(f.camera_id, None)
                raise
            self.crossings.sent()
        self._written.update(marks)
        self.last_ok = now
        if self.sweeper is not None and self.sweeper.due(now):
            self.sweeper.sweep(now)
        if self._failing:
            log.info("fleet state: writing again")
            self._failing = False
        return len(states)

    def _due_frames(self, now: dt.datetime) -> list[SharedFrame]:
        opts = self.options
        if opts.frame_interval_s <= 0:
            return []
        out = []
        for camera_id, kept in self.latest.items():
            prev = self._frames.get(camera_id)
            if prev is not None and (prev[0] == kept.captured_at
                                     or (now - prev[1]).total_seconds() < opts.frame_interval_s):
                continue
            out.append(SharedFrame(camera_id, kept.captured_at, thumbnail(kept.rgb, opts.frame_width)))
            self._frames[camera_id] = (kept.captured_at, now)
        return out

    def forget(self, keep: set[str]) -> None:
        """Cameras no longer in the site file."""
        for book in (self._written, self._frames):
            for cid in set(book) - keep:
                del book[cid]

    def _error(self, exc: Exception) -> None:
        if is_outage(exc):
            if not self._failing:
                log.warning("fleet state: the shared store is unreachable (%s); other replicas show this "
                            "replica's cameras as stale until it answers", describe(exc))
            self._failing = True
        else:
            log.exception("fleet state: write failed", exc_info=exc)
