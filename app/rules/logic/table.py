"""The camera table: one ``CameraState`` per configured camera, swapped atomically.

Readers on the frame path take the dict once per frame without a lock; every change
(reload, reset, offline) builds a new dict and swaps it under ``lock``, so a frame never
sees a half-applied site file. A reload keeps the state (tracks, open events) of every
camera whose configuration did not change.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from app.rules.logic.evaluator import CameraRules, CameraState
from app.rules.logic.records import Event
from app.rules.site.schema import Camera, SiteConfig

# how a camera's rule state is made: in this process (CameraRules), or kept in a worker process
# (app/rules/service/shards.py: ShardedCamera); both are a CameraState
StateFactory = Callable[[Camera, SiteConfig], CameraState]


class CameraTable:
    def __init__(self, config: SiteConfig, make: StateFactory = CameraRules) -> None:
        self.lock = threading.RLock()  # serialises swaps (reload, reset, offline); frames never take it
        self.config = config
        self._make = make
        self._cameras: dict[str, CameraState] = {c.id: make(c, config) for c in config.cameras}

    def get(self, camera_id: str) -> CameraState | None:
        return self._cameras.get(camera_id)

    def __contains__(self, camera_id: object) -> bool:
        return camera_id in self._cameras

    def ids(self) -> list[str]:
        return list(self._cameras)

    def states(self) -> list[CameraState]:
        return list(self._cameras.values())

    def camera(self, camera_id: str) -> Camera | None:
        """The configured camera (None when it is not in the site file)."""
        return next((c for c in self.config.cameras if c.id == camera_id), None)

    def thresholds(self) -> dict[str, float]:
        """Seconds of silence after which each camera is offline."""
        return {c.id: self.config.offline_after(c) for c in self.config.cameras}

    def load(self, config: SiteConfig) -> tuple[list[CameraState], int]:
        """Switch to ``config``: (states no longer in use, how many cameras kept theirs).
        Call with ``lock`` held."""
        old = self._cameras
        same_globals = config.timezone == self.config.timezone and config.tracker == self.config.tracker
        new: dict[str, CameraState] = {}
        for cam in config.cameras:
            prev = old.get(cam.id)
            if prev is not None and same_globals and prev.camera.rules_part() == cam.rules_part():
                prev.camera = cam  # only its view checks changed, if anything: the rule state stays
                new[cam.id] = prev
            else:
                new[cam.id] = self._make(cam, config)
        self.config = config
        self._cameras = new  # atomic swap: frames read the dict once
        retired = [c for cid, c in old.items() if new.get(cid) is not c]
        return retired, sum(1 for cid, c in new.items() if old.get(cid) is c)

    def renew(self, camera_id: str) -> CameraState | None:
        """Give one camera a fresh state (reset, offline); the old one, or None if unknown.
        Call with ``lock`` held."""
        old = self._cameras.get(camera_id)
        if old is not None:
            self._cameras = {**self._cameras, camera_id: self._make(old.camera, self.config)}
        return old

    def open_events(self, camera_id: str | None = None) -> list[Event]:
        """Open events of one camera (unknown: none) or of every camera."""
        if camera_id is not None:
            cams = [self._cameras[camera_id]] if camera_id in self._cameras else []
        else:
            cams = list(self._cameras.values())
        out: list[Event] = []
        for cam in cams:
            with cam.lock:
                out.extend(cam.open_events())
        return out
