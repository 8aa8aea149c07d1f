"""What the layers above may ask of the rules, by role, and the null object used when they are off.

One protocol per kind of caller: ``FrameRules`` (the per-frame flow), ``RulesStatus``
(health and status), ``EventQueries``, ``CameraQueries``, ``SiteAdmin`` (the routers of
each resource) and ``RulesLifecycle`` (the lifespan); ``Rules`` is all of them, the
façade's public surface (``app.rules.service.facade.RulesService`` fulfils it). Callers are
typed without importing the rules stack (SQLAlchemy, Alembic, paho, ruamel, PyAV): a
server without a site file never loads it. ``NoRules`` stands in for every role when no
site file is configured: frames are not evaluated, and the rules' own routes answer 404
``rules_disabled``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from app.core.errors import NotFound
from app.core.types import Detection
from app.inference.vision.annotate import ZoneOverlay


class FrameRules(Protocol):
    """What one frame needs (app/flow): the capture-time policy, evaluation, the zones to draw."""

    enabled: bool

    def accept_capture_time(self, camera_id: str, timestamp: dt.datetime | None) -> dt.datetime | None: ...

    def evaluate(self, camera_id: str, timestamp: dt.datetime | None, frame_size: tuple[int, int],
                 detections: list[Detection], frame_rgb: np.ndarray | None = None) -> list[dict[str, Any]]: ...

    def zones_for(self, camera_id: str) -> Sequence[ZoneOverlay]: ...


class RulesStatus(Protocol):
    """What /health, /health/ready and /status show: the event store, the outboxes, the fleet."""

    def store_status(self) -> str | None: ...

    def delivery_state(self) -> dict[str, Any]: ...

    def fleet_status(self) -> dict[str, Any] | None: ...


class EventQueries(Protocol):
    """The events routes: list, fetch and review events, and their evidence files."""

    def get_event(self, event_id: str) -> dict[str, Any] | None: ...

    def query_events(self, **filters: Any) -> Any: ...  # app.rules.store.events.EventPage

    def review_event(self, event_id: str, changes: dict[str, Any], by: str) -> dict[str, Any] | None: ...

    def snapshot_path(self, event_id: str) -> Path | None: ...

    def clip_path(self, event_id: str) -> Path | None: ...


class CameraQueries(Protocol):
    """The camera routes: each camera's health, counts and newest frame, accepting its view,
    and which cameras the site file names (at which version)."""

    @property
    def camera_ids(self) -> list[str]: ...

    def cameras(self) -> list[dict[str, Any]]: ...

    def camera(self, camera_id: str) -> dict[str, Any]: ...

    def counts(self, camera_id: str, since: dt.datetime | None) -> dict[str, Any]: ...

    def latest_frame(self, camera_id: str) -> tuple[bytes, dt.datetime]: ...

    def accept_view(self, camera_id: str) -> dict[str, Any]: ...

    def site_version(self) -> str: ...


class SiteAdmin(Protocol):
    """Site administration: the site document and its zone edits, reload (or a dry run of
    another file), a camera's reset."""

    @property
    def camera_ids(self) -> list[str]: ...

    @property
    def loaded_at(self) -> dt.datetime: ...

    @property
    def config(self) -> Any: ...  # app.rules.site.schema.SiteConfig (the ingest starts with it)

    def site_document(self) -> dict[str, Any]: ...

    def site_version(self) -> str: ...

    def put_zone(self, camera_id: str, zone_name: str, zone: dict[str, Any] | None,
                 if_match: str | None = None) -> dict[str, Any]: ...

    def reload(self, trigger: str = "request") -> None: ...

    def reset_camera(self, camera_id: str) -> int: ...

    def replay(self, site: Any, since: dt.datetime, until: dt.datetime) -> Any: ...

    def dry_run(self, text: str, as_json: bool, since: dt.datetime, until: dt.datetime,
                source: str = "<request body>") -> dict[str, Any]: ...


class RulesLifecycle(Protocol):
    """What the lifespan and ``campusguard serve`` hold: start, stop, reload on SIGHUP."""

    def start(self) -> None: ...

    def stop(self) -> None: ...

    def reload_or_log(self) -> bool: ...


class Rules(FrameRules, RulesStatus, EventQueries, CameraQueries, SiteAdmin, RulesLifecycle, Protocol):
    """Every role at once: what the composition root builds and holds. A caller takes the
    narrowest role it needs (app/api/deps.py names one dependency per role)."""


def disabled() -> NotFound:
    return NotFound("rules are disabled: no site_config is set", code="rules_disabled")


class NoRules(FrameRules, RulesStatus, RulesLifecycle):
    """No site file: every frame passes through unevaluated; rules routes are 404. The frame, status and
    lifecycle roles are answered here; the others (events, cameras, site) refuse through ``__getattr__``."""

    enabled = False
    camera_ids: list[str] = []

    def accept_capture_time(self, camera_id: str, timestamp: dt.datetime | None) -> dt.datetime | None:
        return timestamp

    def evaluate(self, camera_id: str, timestamp: dt.datetime | None, frame_size: tuple[int, int],
                 detections: list[Detection], frame_rgb: np.ndarray | None = None) -> list[dict[str, Any]]:
        return []

    def zones_for(self, camera_id: str) -> Sequence[ZoneOverlay]:
        return []

    def store_status(self) -> str | None:
        return None

    def delivery_state(self) -> dict[str, Any]:
        return {"webhooks": [], "mqtt": None}

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def reload_or_log(self) -> bool:
        return False

    def fleet_status(self) -> dict[str, Any] | None:
        return None  # no event store: no fleet state

    def __getattr__(self, name: str) -> Any:
        """Any other rules call (the rules' own routes): 404 ``rules_disabled``."""
        if name.startswith("_"):
            raise AttributeError(name)

        def refuse(*args: Any, **kwargs: Any) -> Any:
            raise disabled()

        return refuse
