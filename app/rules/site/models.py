"""The site file against the served models (issue 41, docs/models.md): each camera's
``model:`` must be served, and its rules' ``classes`` must be classes of that model.

Pure functions of the config and the models' classes, so the same check runs where each
caller needs it: at startup before the server opens (``campusguard serve`` exits 2) and on
every reload or zone edit before anything is applied (refused as ``invalid_site_config``).
A model whose classes are not known yet (no models file: they are read from the model once
it has loaded) is checked from then on.
"""

from __future__ import annotations

from collections.abc import Mapping

from app.rules.site.schema import SiteConfig

MAX_LISTED = 12


def camera_models(config: SiteConfig, default: str) -> dict[str, str]:
    """Camera id -> the model it uses (``model:``, or ``default``)."""
    return {camera.id: camera.model or default for camera in config.cameras}


def model_errors(config: SiteConfig, classes: Mapping[str, Mapping[int, str] | None], default: str) -> list[str]:
    """Every camera naming a model not in ``classes`` (name -> its classes, None while unknown), and
    every rule whose ``classes`` its camera's model does not detect, each with its field."""
    errors: list[str] = []
    for i, camera in enumerate(config.cameras):
        name = camera.model or default
        if name not in classes:
            errors.append(f"cameras[{i}].model: unknown model {name!r} (camera {camera.id}); the service serves "
                          f"{', '.join(classes)}")
            continue
        known = classes[name]
        if known is None:
            continue
        names = set(known.values())
        for j, zone in enumerate(camera.zones):
            for k, rule in enumerate(zone.rules):
                missing = [c for c in rule.classes if c not in names]
                if missing:
                    listed = ", ".join(sorted(names)[:MAX_LISTED]) + (", ..." if len(names) > MAX_LISTED else "")
                    errors.append(f"cameras[{i}].zones[{j}].rules[{k}].classes: {missing} are not classes of model "
                                  f"{name!r} (camera {camera.id}), which detects {listed}")
    return errors
