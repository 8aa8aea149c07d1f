"""Replicas agree on runtime model changes within seconds (issue 41 part 3, docs/models.md).

``POST``/``PUT``/``DELETE /admin/models`` change one replica. ``ModelSync`` is an observer of
its ``ModelSwitch``: each change made there is appended to the shared log of the event store
(``campusguard_model_changes``: name, action, weights relative to the models folder, the
weights' and the models file's SHA-256, seq, time, replica). Every replica polls the log every
CAMPUSGUARD_MODELS_SYNC_S and applies the changes after the last seq it has seen through its
own switch, with every check a local change gets (models folder, classes against its site
file, memory). A change this replica cannot apply is never silently skipped: it is logged and
listed in ``GET /models`` (``sync.refused``: the change, the error code and message) until a
later change of that name applies. A change of a name that is busy here (loading, draining)
is retried at the next poll; a change whose weights file here has another SHA-256 than the
writer's is refused (``weights_differ``: the replicas do not share one models folder).

**After a restart** the replica first serves the models file, then catches up with the whole
log: for each name, its last change wins if the models file is the one the change was made
under (same SHA-256), and the models file wins if it changed since (an edit of the file, a new
ConfigMap, is the newer decision). Changes already in force (same weights) cost nothing.

Without an event store (no site file) the log is ``NoChangeLog``: changes stay on the replica
that made them, and a restart serves the models file.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.config import Settings
from app.core.errors import ServiceError
from app.core.files import file_sha256
from app.core.modellog import ChangeLog, LoggedChange, NoChangeLog
from app.core.slot import Slot
from app.core.timeutil import iso, utcnow
from app.flow.modelchanges import ModelChange
from app.flow.models import ModelRouter
from app.flow.modelswap import ModelSwitch

log = logging.getLogger("campusguard.models")


@dataclass(frozen=True, slots=True)
class SyncOptions:
    replica: str  # this replica's id (CAMPUSGUARD_REPLICA_ID or the host name)
    poll_s: float  # CAMPUSGUARD_MODELS_SYNC_S; 0 = off
    folder: Path  # the models folder: weights are logged relative to it
    models_file_sha256: str | None  # the models file this replica serves (None: none)


class ModelSync:
    """The switch's observer (publish) and the log's poller (apply); module docstring."""

    def __init__(self, switch: Slot[ModelSwitch], router: ModelRouter, options: SyncOptions) -> None:
        self.switch, self.router, self.options = switch, router, options
        self.log: ChangeLog = NoChangeLog()
        self.last_seq = 0
        self.caught_up = False
        self.refused: dict[str, dict[str, Any]] = {}  # name -> the change refused here and why
        self._pending: list[LoggedChange] = []  # written here, not yet stored (the store was down)
        self._own: set[int] = set()  # seqs this process wrote: already in force here
        self._lock = threading.Lock()
        self._flushing = threading.Lock()  # one writer of the pending rows at a time (a change's thread, the poller)
        self._applying = threading.local()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._ready: Callable[[], bool] = lambda: False

    # --- publish (an observer of this replica's switch) ------------------------------
    def changed(self, change: ModelChange) -> None:
        if getattr(self._applying, "on", False) or not self.log.enabled:
            return  # a change from the log itself, or no store: nothing to share
        served = change.after
        weights = sha = None
        if served is not None:
            path = served.weights
            weights = str(path.relative_to(self.options.folder)) if path.is_relative_to(self.options.folder) \
                else str(path)
            sha = file_sha256(path)
        row = LoggedChange(at=utcnow(), name=change.name, action=change.action, weights=weights, weights_sha256=sha,
                           models_file_sha256=self.options.models_file_sha256, by=self.options.replica)
        with self._lock:
            self._pending.append(row)
            self.refused.pop(change.name, None)  # this replica's own change of the name supersedes a refused one
        self._flush()

    def _flush(self) -> None:
        """The pending rows written in order, each once: a change's thread and the poller may both
        call this, so one writes while the other finds the list already handled."""
        with self._flushing:
            while True:
                with self._lock:
                    if not self._pending:
                        return
                    row = self._pending[0]
                try:
                    seq = self.log.append(row)
                except Exception as exc:  # noqa: BLE001 - the store is down or not migrated yet: kept, retried
                    log.warning("model %s: the %s could not be written to the event store (retried every %.1fs): "
                                "%s", row.name, row.action, self.options.poll_s, exc)
                    return
                with self._lock:
                    self._pending.pop(0)
                    self._own.add(seq)

    # --- apply (the poller) ----------------------------------------------------------
    def attach(self, changes: ChangeLog, ready: Callable[[], bool]) -> None:
        """Share through ``changes`` from now on and poll it (``ready``: this replica's models are
        loaded, so the log's changes can be applied); nothing to do without a store or with polling off."""
        self.log, self._ready = changes, ready
        if changes.enabled and self.options.poll_s > 0:
            self._thread = threading.Thread(target=self._run, name="campusguard-model-sync", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)

    def _run(self) -> None:
        while not self._stop.wait(self.options.poll_s):
            if self._ready():
                try:
                    self.poll()
                except Exception:  # noqa: BLE001 - the next poll tries again; the thread must not die
                    log.exception("model sync: a poll failed")

    def poll(self) -> None:
        """Write what is pending, then apply the log's changes after the last seen."""
        self._flush()
        try:
            rows = self.log.after(self.last_seq)
        except Exception as exc:  # noqa: BLE001 - not reachable or not migrated yet
            log.debug("model sync: the event store cannot be read now: %s", exc)
            return
        if not self.caught_up:
            self._catch_up(rows)
            return
        for row in rows:
            if row.seq not in self._own and not self._apply(row):
                return  # busy here: this change and the ones after it wait for the next poll
            self.last_seq = row.seq

    def _catch_up(self, rows: list[LoggedChange]) -> None:
        """After a start: each name's last change, where the models file did not change since."""
        while rows:
            more = self.log.after(rows[-1].seq)
            if not more:
                break
            rows += more
        last: dict[str, LoggedChange] = {}
        for row in rows:
            last[row.name] = row
        for name, row in last.items():
            if row.models_file_sha256 != self.options.models_file_sha256:
                log.info("model %s: the models file changed since change %d (%s by %s): the models file wins",
                         name, row.seq, row.action, row.by)
            elif not self._apply(row):
                return  # busy: the catch-up runs again at the next poll
        self.last_seq = rows[-1].seq if rows else self.last_seq
        self.caught_up = True

    def _apply(self, row: LoggedChange) -> bool:
        """``row`` through this replica's switch; False when the name is busy here (retry)."""
        switch = self.switch.get()
        entry = self.router.models.find(row.name)
        if row.action != "unload":
            here = file_sha256(self.options.folder / (row.weights or ""))
            if here != row.weights_sha256:
                self._refuse(row, "weights_differ", f"the models folder here holds another {row.weights} (SHA-256 "
                             f"{(here or 'unreadable')[:12]}, replica {row.by}'s {(row.weights_sha256 or '?')[:12]}): "
                             "the replicas must share one models folder")
                return True
        self._applying.on = True
        try:
            if row.action == "unload":
                if entry is not None:
                    switch.unload(row.name)
            elif entry is None:
                switch.load(row.name, row.weights or "")
            elif file_sha256(entry.weights) != row.weights_sha256:
                switch.swap(row.name, row.weights or "")
        except ServiceError as exc:
            if exc.code == "model_busy":
                return False
            self._refuse(row, exc.code, exc.message)
            return True
        finally:
            self._applying.on = False
        with self._lock:
            self.refused.pop(row.name, None)
        log.info("model %s: change %d (%s%s by replica %s) in force here", row.name, row.seq, row.action,
                 f" of {row.weights}" if row.weights else "", row.by)
        return True

    def _refuse(self, row: LoggedChange, code: str, message: str) -> None:
        with self._lock:
            self.refused[row.name] = {"seq": row.seq, "action": row.action, "weights": row.weights, "by": row.by,
                                      "at": iso(row.at), "error": code, "message": message}
        log.warning("model %s: change %d (%s of %s by replica %s) refused here: %s: %s; this replica differs until a "
                    "later change of the name applies (GET /models: sync.refused)", row.name, row.seq, row.action,
                    row.weights, row.by, code, message)

    def report(self) -> dict[str, Any]:
        """What ``GET /models`` shows as ``sync``."""
        with self._lock:
            pending, refused = len(self._pending), [{"name": n, **r} for n, r in sorted(self.refused.items())]
        return {"enabled": self.log.enabled and self.options.poll_s > 0, "replica": self.options.replica,
                "poll_s": self.options.poll_s, "last_seq": self.last_seq, "caught_up": self.caught_up,
                "unpublished": pending, "refused": refused}


def build_model_sync(switch: Slot[ModelSwitch], router: ModelRouter, settings: Settings) -> ModelSync:
    """The sync of this replica's models (attached to the event store's log by the lifespan)."""
    from app.wiring.http import replica_id

    models_file = file_sha256(settings.models_file) if settings.models_file is not None else None
    return ModelSync(switch, router, SyncOptions(replica=replica_id(settings), poll_s=settings.models_sync_s,
                                                 folder=settings.resolved_models_dir.resolve(),
                                                 models_file_sha256=models_file))
