"""The rules stack's value types and options: light (nothing of the rules stack is imported
until an option object is made), shared by app/wiring/rules.py and app/wiring/rules_service.py."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.config import Settings
from app.core.audit import AuditTrail, NoAudit
from app.core.modellog import ChangeLog, NoChangeLog
from app.rules.port import Rules
from app.wiring.http import replica_id

if TYPE_CHECKING:
    from app.rules.delivery.mqtt import MqttOptions
    from app.rules.service.fleetwriter import FleetOptions


@dataclass(frozen=True)
class RulesStack:
    rules: Rules
    audit: AuditTrail = field(default_factory=NoAudit)  # in the event store; log lines only without one
    # what follows the site file (SiteListener: check, then applied): the camera streams' book, the ingest
    site_listeners: list[Any] = field(default_factory=list)
    # the runtime model changes the replicas share (in the event store; NoChangeLog: each replica its own)
    model_changes: ChangeLog = field(default_factory=NoChangeLog)


def fleet_options(settings: Settings) -> FleetOptions:
    """The shared camera state's options (app/rules/service/fleetwriter.py)."""
    from app.rules.service.fleetwriter import FleetOptions

    return FleetOptions(replica_id=replica_id(settings), interval_s=settings.fleet_interval_s,
                        stale_after_s=settings.fleet_stale_after_s, frame_interval_s=settings.fleet_frame_interval_s,
                        orphan_after_s=settings.fleet_orphan_after_s)


def mqtt_options(settings: Settings) -> MqttOptions:
    from app.rules.delivery.mqtt import MqttOptions

    assert settings.mqtt_url, "MQTT is off"
    return MqttOptions(
        url=settings.mqtt_url, username=settings.mqtt_username,
        password=settings.mqtt_password.get_secret_value(), topic_prefix=settings.mqtt_topic_prefix,
        discovery_prefix=settings.mqtt_discovery_prefix, qos=settings.mqtt_qos, client_id=settings.mqtt_client_id,
        ca_file=settings.mqtt_ca_file, ack_timeout_s=settings.webhook_timeout_s,
        max_backoff_s=settings.webhook_max_backoff_s)
