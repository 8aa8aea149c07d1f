"""Named models (issue 41, docs/models.md): the models file read and checked, one ``Settings``
per model, and the ``ModelSet`` the routes, the flow and the loader share.

Without CAMPUSGUARD_MODELS_FILE there is one model, CAMPUSGUARD_WEIGHTS, and nothing changes.
With one, the first model of the file is the default: ``default_settings`` makes the service's
own runtime settings (weights, name, backend, precision, shapes) that model's, so every part
built for one model (the gate, the shadow reference, /health, the build info) is built for
the default exactly as before; each other model gets its own copy of the settings
(``model_settings``) and with it its own engine, queue and batches.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from app.config import Settings
from app.core.errors import ConfigError
from app.core.slot import Slot
from app.flow.models import ModelRouter
from app.inference.backends.auto import Choice
from app.inference.catalog import Catalog, ModelsConfigError, NamedModel, load_models
from app.inference.engine import InferenceEngine
from app.inference.modelset import ModelSet, RequestedRuntime, ServedModel

if TYPE_CHECKING:
    from app.rules.site.schema import SiteConfig

SETTING = "CAMPUSGUARD_MODELS_FILE"


def load_catalog(settings: Settings) -> Catalog | None:
    """The models file, read and checked (weights inside the models folder, classes read from
    each model); None without one. ConfigError naming the setting and the field otherwise."""
    if settings.models_file is None:
        return None
    folder = settings.resolved_models_dir
    if not folder.is_dir():
        raise ConfigError(f"CAMPUSGUARD_MODELS_DIR: {folder} is not a folder (the models file's weights are read "
                          "only from it; default: the folder of CAMPUSGUARD_WEIGHTS)")
    try:
        return load_models(settings.models_file, folder)
    except ModelsConfigError as exc:
        raise ModelsConfigError(f"{SETTING}={settings.models_file}", exc.errors) from None


def model_settings(settings: Settings, model: NamedModel) -> Settings:
    """``settings`` (the service's, as configured) with ``model``'s runtime: its weights and name,
    and its backend, precision and shapes where the models file sets them (else the service's)."""
    spec = model.spec
    return settings.model_copy(update={
        "weights": model.path, "model_name": model.name, "backend": spec.backend or settings.backend,
        "precision": spec.precision or settings.precision,
        "shapes": spec.shapes if spec.shapes is not None else settings.shapes,
        "models_dir": settings.resolved_models_dir})


def default_settings(settings: Settings, catalog: Catalog | None) -> Settings:
    """The service's settings with the default model's runtime (unchanged without a models file);
    ``settings`` are the service's as configured (every model's settings derive from them)."""
    return settings if catalog is None else model_settings(settings, catalog.default)


def other_models(settings: Settings, catalog: Catalog | None) -> list[tuple[str, Settings]]:
    """Every model after the default, with its own settings (none without a models file)."""
    if catalog is None:
        return []
    return [(model.name, model_settings(settings, model)) for model in catalog.models[1:]]


def check_models(settings: Settings, catalog: Catalog | None) -> dict[str, Choice]:
    """Each other model's runtime resolved on this machine and checked like the service's own
    (a precision its backend cannot run, .onnx for torch): ConfigError naming the model."""
    from app.wiring.runtime import resolve_runtime

    choices: dict[str, Choice] = {}
    for index, (name, own) in enumerate(other_models(settings, catalog), start=1):
        try:
            choices[name] = resolve_runtime(own)
        except ConfigError as exc:
            raise ConfigError(f"{SETTING}: models[{index}] ({name}): {exc.message}") from None
    return choices


def build_model_set(settings: Settings, catalog: Catalog | None, engine: Slot[InferenceEngine | None]) -> ModelSet:
    """The served models, the default's engine in ``engine`` (the slot /health and the shadow
    lane read); the others get their own slots. Classes come from each model's metadata with a
    models file; without one they are known once the model is loaded."""
    requested = requested_runtime(settings, catalog)
    if catalog is None:
        return ModelSet([ServedModel(settings.display_model_name, settings.weights, settings.backend,
                                     settings.precision, slot=engine)], requested)
    served = []
    for index, model in enumerate(catalog.models):
        own = model_settings(settings, model)
        served.append(ServedModel(model.name, model.path, own.backend, own.precision, dict(model.names),
                                  slot=engine if index == 0 else Slot[InferenceEngine | None](None)))
    return ModelSet(served, requested)


def named_settings(settings: Settings, catalog: Catalog | None, name: str) -> Settings:
    """The settings a model of that name is built with: its models-file entry's where the file
    names it, else the service's own."""
    named = catalog.get(name) if catalog is not None else None
    return model_settings(settings, named) if named is not None else settings


def requested_runtime(settings: Settings, catalog: Catalog | None) -> RequestedRuntime:
    """The (backend, precision) a model loaded at runtime (POST /admin/models, a replica's or the
    restart's replay of one) is asked for: its models-file entry's where the file names it (a model
    unloaded and loaded again), else the service's settings: what the loader builds it with
    (app/wiring/model_admin.py). A swap keeps the entry's, so it keeps these too."""

    def requested(name: str) -> tuple[str, str]:
        own = named_settings(settings, catalog, name)
        return own.backend, own.precision

    return requested


def model_classes(models: ModelSet) -> dict[str, Mapping[int, str] | None]:
    """Each model's classes as known now (None: not loaded yet, without a models file)."""
    return {model.name: model.class_names() for model in models.all()}


def check_site_models(config: SiteConfig, path: Path | str, models: ModelSet) -> None:
    """SiteConfigError (every problem, each with its field) when a camera names a model not served,
    or a rule's classes are not its camera's model's (app/rules/site/models.py)."""
    from app.rules.site.loader import SiteConfigError
    from app.rules.site.models import model_errors

    errors = model_errors(config, model_classes(models), models.default)
    if errors:
        raise SiteConfigError(path, errors)


class SiteModels:
    """Follows the site file for the router (a site listener, app/rules/service/siteconfig.py):
    a reload or zone edit whose cameras name an unknown model, or whose rules name classes their
    camera's model does not detect, is refused before anything is applied; an applied one
    becomes the router's camera map."""

    def __init__(self, router: ModelRouter, path: Path | str) -> None:
        self.router, self.path = router, path

    def check(self, config: SiteConfig) -> None:
        check_site_models(config, self.path, self.router.models)

    def applied(self, config: SiteConfig) -> None:
        from app.rules.site.models import camera_models

        self.router.assign(camera_models(config, self.router.default))


def follow_site_models(listeners: list, config: SiteConfig, router: ModelRouter, path: Path | str) -> None:
    """The running site file checked against the models (SiteConfigError: startup stops) and its
    camera map in the router; from then on every reload (first among the site's listeners)."""
    follower = SiteModels(router, path)
    follower.check(config)
    follower.applied(config)
    listeners.insert(0, follower)
