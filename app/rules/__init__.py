"""Campus-security rules, in subpackages along their seams (docs/architecture.md):

``site`` the operator's file (schema, loader, writer) · ``logic`` pure per-camera rule
logic · ``store`` persistence (events, outbox, detection log, migrations, retention) ·
``evidence`` snapshots, clips and kept frames · ``delivery`` webhooks and MQTT ·
``service`` the façade the app uses. ``port`` is what the HTTP layer may ask of them.

The public surface is named here and imported lazily, so importing this package does not
load the rules stack (SQLAlchemy, Alembic, paho, ruamel, PyAV) until a name is used.
"""

from __future__ import annotations

import importlib
from typing import Any

_PUBLIC = {
    "RulesService": "app.rules.service.facade",
    "RulesParts": "app.rules.service.facade",
    "Rules": "app.rules.port",
    "NoRules": "app.rules.port",
    "SiteConfig": "app.rules.site.schema",
    "SiteConfigError": "app.rules.site.loader",
    "load_site_config": "app.rules.site.loader",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str) -> Any:
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'app.rules' has no attribute {name!r}")
