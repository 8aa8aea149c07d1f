"""A gone replica's open events, ended by a live one.

A replica that is removed (scale-down, eviction, a crash, a rollout's replaced pod) keeps its
open events in memory only: in the shared store they would stay open for ever. Every live
replica looks, at most every ``every_s``, for open rule events opened by a replica whose
heartbeat (the fleet writer's, app/rules/service/fleetwriter.py) is older than
``orphan_after_s``, and ends each: at its camera's last frame if the gone replica still owns
the camera's row, else at the gone replica's last heartbeat. The atomic ``UPDATE ... WHERE
ended_at IS NULL`` decides which replica ends an event (app/rules/store/fleet.py), and only
that one stores the end's deliveries (webhooks, MQTT), so every receiver hears one end.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import Any

from app.rules.store.fleet import FleetRepo

log = logging.getLogger("campusguard.rules.fleet")

Persist = Callable[[dict[str, Any], str], None]  # EventSink.persist: store the end with its deliveries


class OrphanSweeper:
    def __init__(self, repo: FleetRepo, get: Callable[[str], dict[str, Any] | None], persist: Persist,
                 replica_id: str, orphan_after_s: float, batch: int = 500) -> None:
        self.repo, self.get, self.persist = repo, get, persist
        self.replica_id, self.after_s, self.batch = replica_id, orphan_after_s, batch
        self.every_s = max(1.0, orphan_after_s / 4)  # a gone replica's events end within 1.25 x orphan_after_s
        self._last: dt.datetime | None = None

    def due(self, now: dt.datetime) -> bool:
        return self.after_s > 0 and (self._last is None or (now - self._last).total_seconds() >= self.every_s)

    def sweep(self, now: dt.datetime) -> int:
        """End the open events of replicas silent for ``orphan_after_s``; how many this replica ended."""
        self._last = now
        silent_before = now - dt.timedelta(seconds=self.after_s)
        ended, gone = 0, set()
        while True:
            rows = self.repo.orphaned(silent_before, self.replica_id, self.batch)
            for row, ended_at in rows:
                gone.add(row["replica"])
                if not self.repo.end_orphan(row["id"], ended_at):
                    continue  # another live replica ended it first
                event = self.get(row["id"])
                if event is not None:
                    self.persist(event, "ended")  # same end (idempotent), plus its webhook / MQTT deliveries
                ended += 1
            if len(rows) < self.batch:
                break
        for replica in gone:
            self.repo.clear_open(replica)
        if ended:
            log.warning("ended %d open event(s) of replica(s) %s, silent for over %.0f s", ended,
                        ", ".join(sorted(gone)), self.after_s)
        return ended
