"""Retention: a periodic sweep that keeps the event store and the snapshot folder bounded.

The folder holds each event's evidence: its snapshot (``<id>.jpg``) and its clip
(``<id>.mp4``); "files" below are both.

Every ``interval_s``:

1. events that **ended** more than ``retain_days`` ago are deleted — acknowledged or
   marked false positive ones too (a review never extends retention), open events never —
   with their snapshot and clip files and the delivered outbox rows older than that;
2. snapshot and clip files older than ``retain_days`` are deleted even without a row (with several
   replicas the row may have been deleted by another replica's sweep: each replica has its
   own snapshot folder);
3. while the folder is over ``budget_bytes``, the oldest files go first and their
   events stop pointing at them;
4. detection-log frames (app/rules/store/framelog.py) captured more than ``frames_retain_days``
   ago are deleted, whether the log is on or not (turning it off must not keep a week of
   frames forever);
5. audit records (app/rules/store/audit.py) older than ``audit_retain_days`` are deleted (the
   only way a record ever leaves the trail);
6. line crossings (app/rules/store/fleet.py, the counts) older than ``retain_days`` are
   deleted, as are replicas silent since then that own no camera.

Every replica runs the sweep; the deletes are idempotent, so running it twice is harmless.
"""

from __future__ import annotations

import datetime as dt
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from app.core.background import Periodic
from app.core.metrics import Metrics
from app.core.timeutil import utcnow
from app.rules.store.db import EventStore
from app.rules.store.errors import is_outage
from app.rules.store.series import StoreSeries

log = logging.getLogger("campusguard.rules.retention")
COLUMNS = {".jpg": "snapshot", ".mp4": "clip"}  # evidence file suffix -> the event column pointing at it


class EvidenceFolder(Protocol):
    """What retention needs of the evidence folder (app/rules/evidence/files.py)."""

    def all_of(self, event_id: str) -> list[Path]: ...

    def listing(self) -> list[tuple[float, int, Path]]: ...


@dataclass(frozen=True, slots=True)
class RetentionOptions:
    retain_days: float = 30.0
    budget_bytes: int = 0  # 0 = no budget
    interval_s: float = 600.0
    frames_retain_days: float = 7.0
    audit_retain_days: float = 365.0


class RetentionSweeper:
    def __init__(self, store: EventStore, evidence: EvidenceFolder, options: RetentionOptions,
                 metrics: Metrics) -> None:
        self.store = store
        self.evidence = evidence
        self.frames_retain = dt.timedelta(days=options.frames_retain_days)
        self.audit_retain = dt.timedelta(days=options.audit_retain_days)
        self.retain = dt.timedelta(days=options.retain_days)
        self.budget_bytes = options.budget_bytes
        self.metrics = StoreSeries.of(metrics)
        self._job = Periodic("retention-sweep", self.sweep, options.interval_s, on_error=self._failed)

    def start(self) -> None:
        self._job.start()  # the first sweep one interval after start

    def stop(self) -> None:
        self._job.stop()

    @staticmethod
    def _failed(exc: Exception) -> None:
        if is_outage(exc):
            log.warning("retention sweep skipped: event store unreachable")
        else:
            log.exception("retention sweep failed", exc_info=exc)

    def sweep(self, now: dt.datetime | None = None) -> dict[str, int]:
        """One pass; counts of what was deleted."""
        now = now or utcnow()
        cutoff = now - self.retain
        deleted = self.store.events.delete_ended_before(cutoff)
        files = sum(self._unlink(path) for event_id, _ in deleted for path in self.evidence.all_of(event_id))
        files += self._expire_files(cutoff)
        over = self._enforce_budget()
        frames = self.store.frames.delete_before(now - self.frames_retain)
        audit = self.store.audit.delete_before(now - self.audit_retain)
        crossings = self.store.fleet.delete_before(cutoff)
        self._count("events", len(deleted))
        self._count("snapshots", files + over)
        self._count("frames", frames)
        self._count("audit", audit)
        self._count("crossings", crossings)
        if deleted or files or over or frames or audit:
            log.info("retention: deleted %d event(s) ended before %s, %d snapshot/clip file(s) by age, %d over the "
                     "disk budget, %d logged frame(s), %d audit record(s)", len(deleted),
                     cutoff.isoformat(timespec="seconds"), files, over, frames, audit)
        return {"events": len(deleted), "snapshots_expired": files, "snapshots_over_budget": over, "frames": frames,
                "audit": audit, "crossings": crossings}

    # --- snapshot files --------------------------------------------------------------------
    def _expire_files(self, cutoff: dt.datetime) -> int:
        limit = cutoff.timestamp()
        return sum(self._unlink(path) for mtime, _, path in self.evidence.listing() if mtime < limit)

    def _enforce_budget(self) -> int:
        files = self.evidence.listing()
        used = sum(size for _, size, _ in files)
        removed: list[Path] = []
        if self.budget_bytes > 0:
            for _, size, path in files:
                if used <= self.budget_bytes:
                    break
                if self._unlink(path):
                    used -= size
                    removed.append(path)
            for suffix, column in COLUMNS.items():
                self.store.events.clear_files(column, [p.stem for p in removed if p.suffix == suffix])
        self.metrics.snapshot_bytes.set(used)
        return len(removed)

    @staticmethod
    def _unlink(path: Path | None) -> int:
        if path is None:
            return 0
        try:
            path.unlink()
            return 1
        except FileNotFoundError:
            return 0

    def _count(self, kind: str, n: int) -> None:
        if n:
            self.metrics.retention_deleted.labels(kind).inc(n)

