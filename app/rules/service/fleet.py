"""One fleet view of every camera, from any replica (docs/deploy.md, "Shared fleet state").

A camera's state lives in the memory of the replica that gets its frames. Each replica's
fleet writer (fleetwriter.py) copies it to the shared store every ``interval_s`` (1 s); this
module answers the camera routes by merging the two:

- a camera this replica received the newest frame of: its own memory (exact, current);
- any other camera: the shared row of its owner (the replica with the newest frame), at most
  ``interval_s`` plus one write old (about 1-2 s; the documented bound is 5 s);
- a row whose owner has not written for ``stale_after_s`` (a replica that died or cannot reach
  the store) is shown with ``stale: true``, and as ``offline`` once its last frame is older
  than the camera's ``offline_after_s``: no replica claims a camera it cannot vouch for.

Line-crossing counts come from the shared crossings table plus the crossings this replica
has not written yet, so every replica gives the same counts and they survive a restart. Reads
never fail a route: with the store unreachable a replica answers from its own memory alone.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from app.core.timeutil import utcnow
from app.rules.logic.counts import CrossingCounts, Key
from app.rules.service.fleetwriter import FleetOptions, FleetWriter
from app.rules.store.errors import describe
from app.rules.store.fleet import FleetRepo

log = logging.getLogger("campusguard.rules.fleet")
STATUSES = ("online", "offline")  # what an owner writes (it never writes a camera it has not seen)
READ_TTL_S = 0.5  # the shared rows are read at most this often (many consoles, one query)


def _dict(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) else None


def _events(value: Any, camera_id: str) -> list[dict[str, Any]]:
    """Open events of a row as written by a replica: dicts of this camera with an id (anything
    else, from a broken or hostile writer, is left out)."""
    if not isinstance(value, list):
        return []
    return [e for e in value
            if isinstance(e, dict) and isinstance(e.get("id"), str) and e.get("camera_id") == camera_id]


def _age(now: dt.datetime, then: Any) -> float | None:
    return max(0.0, (now - then).total_seconds()) if isinstance(then, dt.datetime) else None


class SharedRows:
    """The shared rows of every replica, read at most every ``read_ttl_s``, and the camera
    hand-over question asked of them (built before the camera health that asks it)."""

    def __init__(self, options: FleetOptions, repo: FleetRepo, store_up: Callable[[], bool] = lambda: True) -> None:
        self.options = options
        self.replica_id = options.replica_id
        self.repo = repo
        self.store_up = store_up
        self.read_ttl_s = READ_TTL_S
        self._lock = threading.Lock()
        self._cache: tuple[float, dict[str, dict[str, Any]], dict[str, dict[str, Any]]] | None = None

    def shared(self) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        """(camera rows, replicas) from the store, at most ``read_ttl_s`` old; empty while it is down."""
        if not self.store_up():
            return {}, {}
        with self._lock:
            if self._cache is not None and time.monotonic() - self._cache[0] < self.read_ttl_s:
                return self._cache[1], self._cache[2]
            try:
                states, replicas = self.repo.states(), self.repo.replicas()
            except Exception as exc:
                log.debug("fleet state unreadable: %s", describe(exc))
                return {}, {}
            self._cache = (time.monotonic(), states, replicas)
            return states, replicas

    def elsewhere(self, camera_id: str, arrived_at: dt.datetime | None) -> str | None:
        """The live replica (not stale) whose shared row shows a frame of the camera newer than
        the one that arrived here: the camera moved there (health.py hands it over)."""
        states, replicas = self.shared()
        row = states.get(camera_id)
        owner = str((row or {}).get("owner") or "")
        if not owner or owner == self.replica_id or arrived_at is None:
            return None
        beat = _age(utcnow(), (replicas.get(owner) or {}).get("heartbeat_at"))
        theirs = row.get("last_seen_at") if row is not None else None
        if beat is None or beat > self.options.stale_after_s or not isinstance(theirs, dt.datetime):
            return None
        return owner if theirs > arrived_at else None


class Fleet:
    """The fleet writer and the merged reads of one replica."""

    def __init__(self, rows: SharedRows, writer: FleetWriter, crossings: CrossingCounts) -> None:
        self.rows = rows
        self.options, self.replica_id = rows.options, rows.replica_id
        self.repo, self.store_up = rows.repo, rows.store_up
        self.writer = writer
        self.crossings = crossings

    def shared(self) -> tuple[dict[str, dict[str, Any]], dict[str, dict[str, Any]]]:
        return self.rows.shared()

    def elsewhere(self, camera_id: str, arrived_at: dt.datetime | None) -> str | None:
        return self.rows.elsewhere(camera_id, arrived_at)

    def _owned(self, doc: dict[str, Any], row: dict[str, Any] | None) -> bool:
        """This replica got the camera's newest frame (its memory is the truth)."""
        if doc["status"] == "never_seen":
            return False
        if row is None or row.get("owner") == self.replica_id:
            return True
        theirs = row.get("last_seen_at")
        return not isinstance(theirs, dt.datetime) or doc["last_seen_at"] >= theirs

    def merge(self, docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Local camera documents (GET /cameras), each replaced by its owner's shared row where
        another replica owns the camera; ``reported_by`` names the replica whose state it is."""
        states, replicas = self.shared()
        now = utcnow()
        out = []
        for doc in docs:
            row = states.get(doc["id"])
            if self._owned(doc, row):
                out.append({**doc, "reported_by": self.replica_id, "stale": False})
            elif row is None:
                out.append({**doc, "reported_by": None, "stale": False})
            else:
                out.append(self._remote(doc, row, replicas, now))
        return out

    def _remote(self, doc: dict[str, Any], row: dict[str, Any], replicas: dict[str, dict[str, Any]],
                now: dt.datetime) -> dict[str, Any]:
        owner = str(row.get("owner") or "")
        beat = _age(now, (replicas.get(owner) or {}).get("heartbeat_at"))
        last_seen = row.get("last_seen_at") if isinstance(row.get("last_seen_at"), dt.datetime) else None
        # stale: its owner stopped writing, or the owner is this replica's previous life (restarted)
        stale = beat is None or beat > self.options.stale_after_s or owner == self.replica_id
        status = row.get("status") if row.get("status") in STATUSES else "offline"
        since_frame = _age(now, last_seen)
        if stale and (since_frame is None or since_frame > doc["offline_after_s"]):
            status = "offline"
        return {**doc, "status": status,
                "last_frame_at": (row.get("last_frame_at")
                                  if isinstance(row.get("last_frame_at"), dt.datetime) else None),
                "last_seen_at": last_seen,
                "seconds_since_last_frame": None if since_frame is None else round(since_frame, 3),
                "open_events": _events(row.get("open_events"), doc["id"]), "view": _dict(row.get("view")),
                "source": _dict(row.get("source")), "reported_by": owner[:64] or None, "stale": stale}

    # --- counts and frames ------------------------------------------------------------------
    def counts(self, camera_id: str, since: dt.datetime | None) -> tuple[dict[Key, int], dt.datetime | None]:
        """Crossings by (line, direction, class) at or after ``since``: the stored ones plus this
        replica's unwritten ones (the writer's lock: none is counted twice or missed while a batch
        commits); this replica's memory alone while the store is unreachable."""
        if self.store_up():
            try:
                with self.writer.lock:
                    stored = self.repo.counts(camera_id, since)
                    pending = self.crossings.pending(camera_id, since)
                return dict(Counter(stored) + Counter(pending)), None
            except Exception as exc:
                log.warning("crossing counts of camera %s from memory: %s", camera_id, describe(exc))
        return self.crossings.since(camera_id, since)

    def frame(self, doc: dict[str, Any], local: tuple[bytes, dt.datetime] | None) -> tuple[bytes, dt.datetime] | None:
        """The newest frame of a camera (``doc``: its local document): this replica's own if it
        owns the camera, else the newer of its own and the shared one (a small JPEG, written at
        most every ``frame_interval_s``)."""
        camera_id = doc["id"]
        if local is not None and self._owned(doc, self.shared()[0].get(camera_id)):
            return local
        try:
            shared = self.repo.frame(camera_id) if self.store_up() else None
        except Exception as exc:
            log.debug("shared frame of camera %s unreadable: %s", camera_id, describe(exc))
            shared = None
        if shared is None or (local is not None and local[1] >= shared.captured_at):
            return local
        return shared.jpeg, shared.captured_at

    # --- GET /status ------------------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        """Which replica answers, and every replica the shared store knows: heartbeat, whether it
        is stale, and the cameras whose rows it owns."""
        states, replicas = self.shared()
        now = utcnow()
        owned: dict[str, list[str]] = {}
        for cid, row in sorted(states.items()):
            owned.setdefault(str(row.get("owner")), []).append(cid)
        ids = sorted(set(replicas) | set(owned) | {self.replica_id})
        listed = []
        for rid in ids:
            rec = replicas.get(rid) or {}
            beat = _age(now, rec.get("heartbeat_at"))
            listed.append({"id": rid, "started_at": rec.get("started_at"), "heartbeat_at": rec.get("heartbeat_at"),
                           "seconds_since_heartbeat": None if beat is None else round(beat, 3),
                           "stale": beat is None or beat > self.options.stale_after_s,
                           "cameras": owned.get(rid, [])})
        return {"replica": self.replica_id, "interval_s": self.options.interval_s,
                "stale_after_s": self.options.stale_after_s, "last_write_at": self.writer.last_ok,
                "shared": self.store_up() and bool(replicas), "replicas": listed}
