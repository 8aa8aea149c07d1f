"""The composition root: every component built from ``Settings``, in one place.

Nothing below this package sees ``Settings``: the engine, the pipeline, the backends, the
keyring, the HTTP layer and the rules take small frozen option objects (or plain values)
filled here. A new setting is therefore one field in app/config/settings.py and one line here,
and a component's tests build it from its options without a settings object. Optional parts
are null objects (``NoRules``, ``NoMqtt``, ``NoClips``, ``NoFrameLog``), never ``None``.

Every part is handed over finished: callbacks and observers go into constructors, parts that
arrive later (the engine, the shadow lane, the rules, the audit trail) into typed slots
(app/core/slot.py), and nothing outside this package assigns an attribute of another object
(tests/unit/test_architecture.py). One module per seam: ``runtime`` (what runs the model:
``auto`` resolved here, never in ``Settings``), ``shadow`` (the reference runtime), ``http``
(keys, the gate, the routes' typed state), ``rules`` / ``rules_service`` (the rules stack,
loaded only with a site file) and ``ingest`` (camera streams), ``model_admin`` / ``rollout`` (runtime model changes).
"""

from __future__ import annotations

from app.wiring.http import (
    api_options,
    auth_mode,
    build_gate,
    build_sources,
    build_state,
    is_loopback,
    key_source,
    keyring,
    record_key_change,
    replica_id,
)
from app.wiring.ingest import build_flow, build_ingest, check_site, ingest_options
from app.wiring.model_admin import install_model_switch
from app.wiring.model_sync import build_model_sync
from app.wiring.models import (
    build_model_set,
    check_models,
    check_site_models,
    default_settings,
    follow_site_models,
    load_catalog,
    model_settings,
    other_models,
)
from app.wiring.rollout import install_rollouts
from app.wiring.rules import RulesStack, build_rules, build_rules_stack, fleet_options, mqtt_options
from app.wiring.runtime import (
    backend_options,
    build_engine,
    build_pipeline,
    check_runtime,
    decode_policy,
    detect_defaults,
    engine_limits,
    load_detector,
    precision_options,
    provision_detector,
    provision_served,
    resolve_runtime,
    site_resolutions,
)
from app.wiring.shadow import (
    WORST_PER_CAMERA,
    build_shadow,
    check_shadow,
    reference_options,
    register_shadow_metrics,
    serving_default,
    shadow_options,
    shadow_weights,
)

__all__ = [
    "WORST_PER_CAMERA", "RulesStack", "api_options", "auth_mode", "backend_options", "build_engine", "build_gate",
    "build_flow", "build_ingest", "build_pipeline", "build_rules", "build_rules_stack", "build_shadow", "build_sources",
    "build_state", "check_runtime", "check_shadow", "check_site", "decode_policy", "detect_defaults",
    "engine_limits", "fleet_options", "ingest_options", "is_loopback", "key_source", "keyring", "load_detector",
    "mqtt_options", "precision_options", "provision_detector", "provision_served", "record_key_change",
    "reference_options", "register_shadow_metrics", "replica_id", "resolve_runtime", "shadow_options",
    "shadow_weights", "site_resolutions", "build_model_set", "check_models", "check_site_models", "default_settings",
    "follow_site_models", "install_model_switch", "install_rollouts", "build_model_sync", "load_catalog",
    "model_settings", "other_models", "serving_default",
]
