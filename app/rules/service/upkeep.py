"""What the rules' parts do when a camera state retires or the site file reloads.

These are the callbacks the parts are built with (app/wiring builds them, in order, before
the parts that call them): ``Retire`` for the camera health sweep, a camera reset and a
reload; ``Reloaded`` for the site manager; ``Declare`` for every change of the camera
table; ``LocalCameras`` for the fleet writer and ``GET /cameras``; ``ClipFailed`` for the
clip recorder. Each holds only the parts it touches, so none of them needs the façade.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from app.rules.delivery.mqtt import MqttBridge, NoMqtt
from app.rules.evidence.clips import ClipRecorder, NoClips
from app.rules.evidence.latest import LatestFrames
from app.rules.logic.evaluator import CameraState
from app.rules.logic.table import CameraTable
from app.rules.service.events import EventSink
from app.rules.service.fleetwriter import FleetWriter
from app.rules.service.health import CameraHealth
from app.rules.service.series import RulesSeries
from app.rules.service.views import ViewChecks
from app.rules.site.schema import SiteConfig
from app.rules.store.db import EventStore
from app.rules.store.errors import describe
from app.rules.store.writer import EventWriter

log = logging.getLogger("campusguard.rules")


class Retire:
    """End the open events of a camera state that is no longer in use; drop its gauges."""

    def __init__(self, sink: EventSink, series: RulesSeries) -> None:
        self.sink, self.series = sink, series

    def __call__(self, cam: CameraState) -> int:
        with cam.lock:
            transitions = cam.close_all()
        for tr in transitions:
            self.sink.persist(dict(tr.event.to_dict()), "ended")
        self.series.retire(cam)
        return len(transitions)


class Declare:
    """Every configured camera's series at 0 (after the start, each reload and each reset)."""

    def __init__(self, series: RulesSeries, table: CameraTable, health: CameraHealth) -> None:
        self.series, self.table, self.health = series, table, health

    def __call__(self) -> None:
        self.series.declare(self.table.config, self.table.states(), self.health.monitor.age_or_nan)


class Reloaded:
    """A new site file is in the camera table: retire the replaced states, and bring every part
    that keeps per-camera state (health, kept frames, clips, fleet rows, view checks, series,
    the MQTT discovery) to the new camera list."""

    def __init__(self, table: CameraTable, retire: Retire, declare: Declare, health: CameraHealth,
                 latest: LatestFrames, clips: ClipRecorder | NoClips, fleet_writer: FleetWriter, views: ViewChecks,
                 mqtt: MqttBridge | NoMqtt) -> None:
        self.table, self.retire, self.declare, self.health = table, retire, declare, health
        self.latest, self.clips, self.fleet_writer, self.views, self.mqtt = latest, clips, fleet_writer, views, mqtt

    def __call__(self, config: SiteConfig, retired: list[CameraState], kept: int) -> None:
        for cam in retired:
            self.retire(cam)
        keep = set(self.table.ids())
        self.health.reloaded(keep)
        self.latest.forget(keep)
        self.clips.forget(keep)
        self.fleet_writer.forget(keep)
        self.views.load(config)
        self.declare()
        self.mqtt.announce(config)


class LocalCameras:
    """This replica's camera documents with their view-check state (before the fleet merge)."""

    def __init__(self, health: CameraHealth, views: ViewChecks) -> None:
        self.health, self.views = health, views

    def __call__(self) -> list[dict[str, Any]]:
        return [{**doc, "view": self.views.state(doc["id"])} for doc in self.health.cameras()]


class ClipFailed:
    """A clip could not be written: the stored event stops pointing at it (best effort; during
    a store outage the URL stays and answers 404)."""

    def __init__(self, writer: EventWriter, store: EventStore) -> None:
        self.writer, self.store = writer, store

    def __call__(self, event_id: str) -> None:
        try:
            self.writer.settle()  # the event's start (with the clip's URL) is in the store first
            self.store.events.clear_files("clip", [event_id])
        except Exception as exc:
            log.warning("could not clear the clip URL of event %s: %s", event_id, describe(exc))


def store_up(writer: EventWriter) -> Callable[[], bool]:
    """Whether the store answers now (its writer's connection): read per call."""
    return lambda: writer.up
