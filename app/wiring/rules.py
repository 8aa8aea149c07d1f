"""The rules stack from the settings: ``NoRules`` without a site file, else the service with
its event store, deliveries and evidence (built in app/wiring/rules_service.py, loaded only
then: a server without a site file never imports SQLAlchemy, Alembic, paho, ruamel or PyAV).

``build_rules_stack`` hands back what the rest of the app needs from it, finished: the
service (as the ``Rules`` port), the audit trail in its store, and the site file's follower
list that the ingest joins. Nobody downcasts the port to reach a part.
"""

from __future__ import annotations

from app.config import Settings
from app.core.metrics import Metrics
from app.core.sources import SourceBook
from app.rules.port import NoRules, Rules
from app.wiring.rules_options import RulesStack, fleet_options, mqtt_options

__all__ = ["RulesStack", "build_rules", "build_rules_stack", "fleet_options", "mqtt_options"]


def build_rules_stack(settings: Settings, metrics: Metrics, sources: SourceBook | None = None) -> RulesStack:
    """The rules with their store migrated, or ``NoRules`` without a site file. Raises
    SiteConfigError / MigrationError (ConfigErrors) on a bad site file or database. ``sources``:
    the camera streams' state, shared with the other replicas through the fleet state, told to
    MQTT (Home Assistant) and following the site file's reloads."""
    if settings.site_config is None:
        return RulesStack(NoRules())
    from app.wiring.rules_service import build_service

    return build_service(settings, metrics, sources)


def build_rules(settings: Settings, metrics: Metrics | None = None, sources: SourceBook | None = None) -> Rules:
    """``build_rules_stack(...).rules``: the service alone (tools and tests)."""
    return build_rules_stack(settings, metrics or Metrics(settings.metrics_max_cameras), sources).rules
