"""Camera ingest (docs/cameras.md): the embedded ingest that pulls the site file's streams and
feeds the engine and the rules, or ``NoIngest``."""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from app.config import Settings
from app.core.metrics import Metrics
from app.core.slot import Slot
from app.core.sources import SourceBook
from app.flow.frame import LiveFlow
from app.flow.models import ModelRouter
from app.inference.engine import InferenceEngine
from app.inference.modelset import ModelSet, ServedModel
from app.rules.port import Rules
from app.wiring.rules import RulesStack
from app.wiring.runtime import detect_defaults

if TYPE_CHECKING:
    from app.inference.catalog import Catalog
    from app.inference.shadow.lane import NoShadow, ShadowLane
    from app.ingest.embedded import EmbeddedIngest, IngestOptions, NoIngest
    from app.ingest.hwaccel import HwaccelProbes

log = logging.getLogger("campusguard.ingest")


def ingest_options(settings: Settings, probes: HwaccelProbes | None = None) -> IngestOptions:
    """The embedded ingest's options; ``hwaccel: auto`` resolved once for this replica (a GPU one
    probes the node: ``probes``, the machine's by default; a CPU one takes none)."""
    from app.ingest.embedded import IngestOptions
    from app.ingest.hwaccel import auto_hwaccel, machine_probes

    on_gpu = settings.device != "cpu"
    hwaccel = auto_hwaccel(on_gpu, probes or machine_probes()) if settings.ingest == "embedded" else "none"
    if on_gpu:
        log.info("camera ingest: hwaccel auto means %s on this replica", hwaccel)
    return IngestOptions(mode=settings.ingest, secrets_dir=settings.secrets_dir, detect=detect_defaults(settings),
                         max_pixels=settings.ingest_max_pixels, max_readers=settings.ingest_max_readers,
                         hwaccel_auto=hwaccel)


def check_site(settings: Settings, catalog: Catalog | None = None) -> None:
    """Before the server starts: the site file as the lifespan will read it, checked against the
    models (``catalog``: the models file's, None for the one model of WEIGHTS), and (ingest
    embedded) every camera source's ${VAR} filled in and ffmpeg present. A ConfigError naming
    the field otherwise: `campusguard serve` exits 2 with it."""
    if settings.site_config is None:
        return
    from app.rules.site.writer import SiteFile

    config, _ = SiteFile(settings.site_config).load()
    from app.wiring.models import build_model_set, check_site_models

    # each camera's model is served and its rules' classes are that model's (docs/models.md)
    check_site_models(config, settings.site_config, build_model_set(settings, catalog, Slot(None)))
    if settings.ingest == "embedded":
        from app.ingest.embedded import check_sources

        check_sources(config, settings.secrets_dir, settings.site_config, os.environ)


class _Reading(Slot[InferenceEngine | None]):
    """A slot that reads a getter: one model whose engine a caller already reads from somewhere."""

    def __init__(self, read: Callable[[], InferenceEngine | None]) -> None:
        super().__init__(None)
        self._read = read

    def get(self) -> InferenceEngine | None:
        return self._read()


def model_router(models: ModelRouter | Callable[[], InferenceEngine | None]) -> ModelRouter:
    """``models`` as a router: itself, or one model whose engine is ``models()`` (a tool or test
    that feeds a single engine, as before several models)."""
    if isinstance(models, ModelRouter):
        return models
    return ModelRouter(ModelSet([ServedModel("default", Path(), slot=_Reading(models))]))


def build_flow(rules: Rules, metrics: Metrics, models: ModelRouter | Callable[[], InferenceEngine | None],
               shadow: Callable[[], ShadowLane | NoShadow] | None = None) -> LiveFlow:
    """The per-frame use case (app/flow/frame.py) for frames that arrive outside a request:
    over each camera's model's engine once it is loaded (``models``; or one engine's getter) and
    the shadow lane once its reference is. The routes get theirs per request from their
    dependencies (app/api/deps.py, ``get_flow``)."""
    from app.inference.shadow.lane import NoShadow

    return LiveFlow(model_router(models), rules, shadow or NoShadow, metrics)


def build_ingest(settings: Settings, stack: RulesStack, metrics: Metrics, book: SourceBook,
                 models: ModelRouter | Callable[[], InferenceEngine | None],
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
