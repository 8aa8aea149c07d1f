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
   frames forever).

Every replica runs the sweep; the deletes are idempotent, so running it twice is harmless.
"""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path

from app.core.background import Periodic
from app.rules.store.events import EventStore
from app.core.timeutil import utcnow
from app.rules.store.writer import is_outage

log = logging.getLogger("campusguard.rules.retention")
SUFFIX_COLUMN = {".jpg": "snapshot", ".mp4": "clip"}  # evidence file -> the event column pointing at it


class RetentionSweeper:
    def __init__(self, store: EventStore, snapshot_dir: Path | None, *, retain_days: float = 30.0,
                 budget_bytes: int = 0, interval_s: float = 600.0, frames_retain_days: float = 7.0,
                 metrics=None) -> None:
        self.store = store
        self.frames_retain = dt.timedelta(days=frames_retain_days)
        self.snapshot_dir = snapshot_dir
        self.retain = dt.timedelta(days=retain_days)
        self.budget_bytes = budget_bytes  # 0 = no budget
        self.metrics = metrics
        self._job = Periodic("retention-sweep", self.sweep, interval_s, on_error=self._failed)

    @classmethod
    def from_settings(cls, store: EventStore, settings, metrics=None) -> "RetentionSweeper":
        return cls(store, settings.snapshot_dir, retain_days=settings.events_retain_days,
                   budget_bytes=int(settings.snapshot_budget_mb * 1024 * 1024),
                   interval_s=settings.retention_sweep_s,
                   frames_retain_days=settings.detection_log_retention_days, metrics=metrics)

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
        deleted = self.store.delete_ended_before(cutoff)
        files = sum(self._unlink(path) for event_id, _ in deleted for path in self._evidence_files(event_id))
        files += self._expire_files(cutoff)
        over = self._enforce_budget()
        frames = self.store.delete_frames_before(now - self.frames_retain)
        self._count("events", len(deleted))
        self._count("snapshots", files + over)
        self._count("frames", frames)
        if deleted or files or over or frames:
            log.info("retention: deleted %d event(s) ended before %s, %d snapshot/clip file(s) by age, %d over the "
                     "disk budget, %d logged frame(s)", len(deleted), cutoff.isoformat(timespec="seconds"), files, over,
                     frames)
        return {"events": len(deleted), "snapshots_expired": files, "snapshots_over_budget": over, "frames": frames}

    # --- snapshot files --------------------------------------------------------------------
    def _evidence_files(self, event_id: str) -> list[Path]:
        if self.snapshot_dir is None or not event_id.isalnum():
            return []
        return [self.snapshot_dir / f"{event_id}{suffix}" for suffix in SUFFIX_COLUMN]

    def _files(self) -> list[tuple[float, int, Path]]:
        """(mtime, size, path) of every snapshot and clip, oldest first."""
        if self.snapshot_dir is None or not self.snapshot_dir.is_dir():
            return []
        out = []
        for path in (p for suffix in SUFFIX_COLUMN for p in self.snapshot_dir.glob(f"*{suffix}")):
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            out.append((st.st_mtime, st.st_size, path))
        return sorted(out)

    def _expire_files(self, cutoff: dt.datetime) -> int:
        limit = cutoff.timestamp()
        return sum(self._unlink(path) for mtime, _, path in self._files() if mtime < limit)

    def _enforce_budget(self) -> int:
        files = self._files()
        used = sum(size for _, size, _ in files)
        removed: list[Path] = []
        if self.budget_bytes > 0:
            for _, size, path in files:
                if used <= self.budget_bytes:
                    break
                if self._unlink(path):
                    used -= size
                    removed.append(path)
            for suffix, column in SUFFIX_COLUMN.items():
                self.store.clear_files(column, [p.stem for p in removed if p.suffix == suffix])
        if self.metrics is not None:
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
        if self.metrics is not None and n:
            self.metrics.retention_deleted.labels(kind).inc(n)

