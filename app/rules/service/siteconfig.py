"""The running site config: reload on request, on SIGHUP, when the file changes, and zone edits.

Every replica checks the file every ``watch_s`` and reloads a changed one by itself, so a
zone edit written by another replica (or a ConfigMap update) reaches every replica without
a restart. A refused version is remembered (``reload_error``, shown in ``GET /site``) and not
retried until the file changes once more. A reload never half-applies: the new file is
parsed and validated first, then the camera table is swapped in one step.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from app.core.background import Periodic
from app.core.timeutil import utcnow
from app.rules.logic.evaluator import CameraState
from app.rules.logic.table import CameraTable
from app.rules.site.schema import SiteConfig
from app.rules.site.writer import SiteFile, version_of

log = logging.getLogger("campusguard.rules")

Reloaded = Callable[[SiteConfig, list[CameraState], int], None]  # (config, retired states, kept count)


class SiteListener(Protocol):
    """Another part of the process that follows the site file (the camera ingest): ``check``
    may refuse a new config (a SiteConfigError naming the field; nothing is applied), ``applied``
    is told once it runs (outside the camera table's lock: it may wait for frames in flight)."""

    def check(self, config: SiteConfig) -> None: ...

    def applied(self, config: SiteConfig) -> None: ...


class SiteManager:
    def __init__(self, path: Path, table: CameraTable, version: str | None, *, watch_s: float,
                 on_reloaded: Reloaded, on_outcome: Callable[[str, str], None],
                 listeners: list[SiteListener] | None = None) -> None:
        self.path = Path(path)
        self.site = SiteFile(self.path)
        self.table = table
        self.on_reloaded = on_reloaded  # the service updates its parts (health, frames, metrics, MQTT)
        self.on_outcome = on_outcome  # (trigger, "ok" | "refused"): the reload metric
        self.version = version if version is not None else self.disk_version()
        self.loaded_at = utcnow()
        self.reload_error: str | None = None  # why the file on disk is not the running version
        self._refused_version = ""
        self._seen_version = ""  # the changed file's version at the last check (it must hold still once)
        self._edit_lock = threading.Lock()
        # the parts that follow the file (the camera streams, the ingest): the composition root's list,
        # which it fills as it builds them
        self.listeners: list[SiteListener] = listeners if listeners is not None else []
        self.watcher = Periodic("site-file-watch", self.check_file, watch_s) if watch_s > 0 else None

    def start(self) -> None:
        if self.watcher is not None:
            self.watcher.start()

    def stop(self) -> None:
        if self.watcher is not None:
            self.watcher.stop()

    def disk_version(self) -> str:
        try:
            return version_of(self.path.read_bytes())
        except OSError:
            return ""

    def file_changed(self) -> float:
        """1 while the file on disk is not the running version (a gauge)."""
        return float(self.disk_version() != self.version)

    # --- reload ---------------------------------------------------------------------------
    def reload(self, trigger: str = "request") -> None:
        """Re-read the site file. On error raise SiteConfigError and keep the running config.

        Cameras whose configuration is unchanged keep their state (tracks, open events);
        open events of changed or removed cameras are ended at that camera's last frame time.
        ``trigger`` (request, signal, zone_edit, file_changed) labels the reload metric.
        """
        try:
            with self.table.lock:
                config, version = self.site.load()  # raises before anything changes
                for listener in self.listeners:
                    listener.check(config)  # e.g. a camera source's ${VAR} that is not set: 422
                retired, kept = self.table.load(config)
                self.version, self.loaded_at = version, utcnow()
                self.on_reloaded(config, retired, kept)
        except Exception as exc:
            # remembered for GET /site, and so that the watcher does not retry this version
            self._refused_version, self.reload_error = self.disk_version(), str(exc)
            self.on_outcome(trigger, "refused")
            raise
        for listener in self.listeners:
            listener.applied(config)
        self.reload_error = None
        self.on_outcome(trigger, "ok")
        log.info("site config %s reloaded: %d camera(s), %d unchanged (state kept), %d replaced or removed",
                 self.path, len(config.cameras), kept, len(retired))

    def _check_followers(self, config: SiteConfig) -> None:
        """A zone edit's config, before it is written, as a reload would check it (each follower)."""
        for listener in self.listeners:
            listener.check(config)

    def reload_or_log(self) -> bool:
        """``reload`` for signal handlers (SIGHUP): log the error list instead of raising."""
        try:
            self.reload("signal")
        except Exception as exc:  # SiteConfigError: the message lists every error
            log.error("site config reload refused; the running config stays in force: %s", exc)
            return False
        return True

    def check_file(self) -> bool:
        """Reload when the file on disk is no longer the running version and has stayed the same
        since the previous check; whether it reloaded. Waiting one interval for the file to hold
        still means an editor or a copy caught half-way (an empty or cut-off file) is never read,
        refused and counted as a refused reload; a finished edit is read one interval later."""
        disk = self.disk_version()
        if not disk or disk in (self.version, self._refused_version):
            self._seen_version = ""
            return False
        if disk != self._seen_version:
            self._seen_version = disk
            return False
        if not self._edit_lock.acquire(blocking=False):
            return False  # a zone edit is writing the file; it reloads itself
        try:
            try:
                self.reload("file_changed")
            except Exception as exc:  # SiteConfigError: the message lists every error
                log.error("site file %s changed on disk (version %s) but was refused; the running config "
                          "(version %s) stays in force: %s", self.path, disk, self.version, exc)
                return False
            log.info("site file %s changed on disk: reloaded version %s", self.path, disk)
            return True
        finally:
            self._edit_lock.release()

    # --- the console's view and edits ------------------------------------------------------
    def document(self) -> dict[str, Any]:
        """The running site config and the version of the file it was loaded from (GET /site),
        with the file's version now and why it was not loaded, when the two differ."""
        disk = self.disk_version()
        return {"version": self.version, "path": str(self.path), "writable": self.site.writable(),
                "loaded_at": self.loaded_at, "file_version": disk,
                "reload_error": self.reload_error if disk != self.version else None,
                "config": self.table.config.model_dump(mode="json")}

    def put_zone(self, camera_id: str, zone_name: str, zone: dict[str, Any] | None,
                 if_match: str | None = None) -> dict[str, Any]:
        """Create / replace / rename (``zone``) or delete (None) one zone in the site file, then
        reload: the next frame of that camera is evaluated with it, other cameras keep their
        state. Errors (app/rules/site/writer.py) leave the file and the running config unchanged."""
        with self._edit_lock:
            self.site.put_zone(camera_id, zone_name, zone, if_match, check=self._check_followers)
            self.reload("zone_edit")
            out: dict[str, Any] = {"version": self.version, "loaded_at": self.loaded_at}
            if zone is not None:
                cam = self.table.camera(camera_id)
                assert cam is not None
                out["zone"] = next(z for z in cam.zones if z.name == zone["name"]).model_dump(mode="json")
            return out
