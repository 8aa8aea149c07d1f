"""Camera ingest (docs/cameras.md): the embedded ingest that pulls the site file's streams and
feeds the engine and the rules, or ``NoIngest``."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING

from app.config import Settings
from app.core.metrics import Metrics
from app.core.sources import SourceBook
from app.flow.frame import LiveFlow
from app.flow.models import ModelRouter
from app.rules.port import Rules
from app.wiring.rules import RulesStack
from app.wiring.runtime import detect_defaults

if TYPE_CHECKING:
    from app.inference.catalog import Catalog
    from app.inference.shadow.lane import NoShadow, ShadowLane
    from app.ingest.embedded import EmbeddedIngest, IngestOptions, NoIngest


def ingest_options(settings: Settings) -> IngestOptions:
    from app.ingest.embedded import IngestOptions

    return IngestOptions(mode=settings.ingest, secrets_dir=settings.secrets_dir, detect=detect_defaults(settings),
                         max_pixels=settings.ingest_max_pixels, max_readers=settings.ingest_max_readers)


def check_site(settings: Settings, catalog: Catalog | None = None) -> None:
    """Before the server starts: the site file as the lifespan will read it, checked against the
    models (``catalog``: the models file's, None for the one model of WEIGHTS), and (ingest
    embedded) every camera source's ${VAR} filled in and ffmpeg present. A ConfigError naming
    the field otherwise: `campusguard serve` exits 2 with it."""
    if settings.site_config is None:
        return
    from app.rules.site.writer import SiteFile

    config, _ = SiteFile(settings.site_config).load()
    from app.core.slot import Slot
    from app.wiring.models import build_model_set, check_site_models

    # each camera's model is served and its rules' classes are that model's (docs/models.md)
    check_site_models(config, settings.site_config, build_model_set(settings, catalog, Slot(None)))
    if settings.ingest == "embedded":
        from app.ingest.embedded import check_sources

        check_sources(config, settings.secrets_dir, settings.site_config, os.environ)


def build_flow(rules: Rules, metrics: Metrics, models: ModelRouter,
               shadow: Callable[[], ShadowLane | NoShadow] | None = None) -> LiveFlow:
    """The per-frame use case (app/flow/frame.py) for frames that arrive outside a request:
    over each camera's model's engine once it is loaded and the shadow lane once its reference
    is. The routes get theirs per request from their dependencies (app/api/deps.py, ``get_flow``)."""
    from app.inference.shadow.lane import NoShadow

    return LiveFlow(models, rules, shadow or NoShadow, metrics)


def build_ingest(settings: Settings, stack: RulesStack, metrics: Metrics, book: SourceBook,
                 models: ModelRouter,
                 shadow: Callable[[], ShadowLane | NoShadow] | None = None) -> EmbeddedIngest | NoIngest:
    """The embedded ingest following the rules' site file, feeding each camera's model's engine
    (``models``: None while it loads) and the rules; ``NoIngest`` with ``CAMPUSGUARD_INGEST=off`` or
    without a site file. It joins the site file's followers, so a reload restarts its streams."""
    from app.ingest.embedded import EmbeddedIngest, EngineFeed, NoIngest

    if not stack.rules.enabled or settings.ingest == "off":
        return NoIngest()
    feed = EngineFeed(build_flow(stack.rules, metrics, models, shadow), detect_defaults(settings))
    ingest = EmbeddedIngest(ingest_options(settings), feed, book, settings.site_config or "", os.environ)
    stack.site_listeners.append(ingest)
    return ingest
