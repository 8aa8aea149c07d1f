"""The composition root's side of runtime model changes (``ModelLoader``, app/flow/modelswap.py):
what needs the settings, the runtimes and the site file.

- weights are confined to the models folder (``confine``, as the models file's are);
- classes come from the model's own metadata and are checked against the site file's rules
  of the cameras on that model, as a reload is;
- memory: a second copy is estimated at ``MEMORY_FACTOR`` times the weights file (Ultralytics
  checkpoints store fp16 weights: an fp32 copy is about 2x the file, and its activations,
  the runtime's workspace and the decode buffers about as much again), compared with what is
  free on the serving model's device: ``torch.cuda.mem_get_info`` on a GPU, psutil's
  ``available`` memory on the CPU;
- an engine is built like a model of the models file at startup (the runtime resolved and
  gated, its own queue and batches) but warmed with one inference only, then marked ready;
  the heavy part (load, build, gate) runs at nice +10 and the model is then opened again at the
  usual priority, since the threads a runtime makes inherit the nice value of their creator.

Nothing is written to the models folder or file, so a read-only one (a Kubernetes ConfigMap)
does not stop a change; the change is shared with the other replicas, and kept over a restart,
through the event store (app/wiring/model_sync.py).
"""

from __future__ import annotations

import gc
from collections.abc import Mapping, Sequence
from pathlib import Path

from app.api.state import AppState
from app.config import Settings
from app.core.metrics import Metrics
from app.flow.modelchanges import SwitchObserver, SwitchObservers
from app.flow.modelswap import MemoryCheck, ModelSwitch
from app.inference.catalog import Catalog, class_names, confine
from app.inference.engine import InferenceEngine
from app.wiring.models import model_classes, named_settings

MEMORY_FACTOR = 4  # bytes of memory per byte of weights file for one more served copy (module docstring)


class RuntimeModels:
    """``ModelLoader`` over the service's settings, its models file and the running site file."""

    def __init__(self, settings: Settings, catalog: Catalog | None, state: AppState, metrics: Metrics) -> None:
        self.settings, self.catalog, self.state, self.metrics = settings, catalog, state, metrics
        self.folder = settings.resolved_models_dir

    def confine(self, weights: str) -> Path:
        return confine(self.folder, weights)

    def classes_of(self, path: Path) -> dict[int, str]:
        if path.suffix.lower() not in (".pt", ".onnx"):
            raise ValueError(f"must be a .pt or .onnx file, got {path.name!r}")
        try:
            return class_names(path)
        except ValueError:
            raise
        except Exception as exc:  # a corrupt checkpoint (unpickling, torch, ConfigError), an unreadable file
            raise ValueError(f"cannot read the model's classes: {type(exc).__name__}: {exc}"[:400]) from None

    def check_classes(self, name: str, classes: Mapping[int, str]) -> list[str]:
        from app.rules.site.models import model_errors

        rules = self.state.rules.get()
        if not rules.enabled or rules.config is None:
            return []
        known = model_classes(self.state.models.models)
        known[name] = classes
        return model_errors(rules.config, known, self.state.models.default)

    def memory(self, path: Path) -> MemoryCheck:
        needed = path.stat().st_size * MEMORY_FACTOR
        engine = self.state.models.models.engine(self.state.models.default)
        device = engine.pipeline.detector.device_info().device if engine is not None else "cpu"
        if device.startswith("cuda"):
            import torch

            free, _ = torch.cuda.mem_get_info(torch.device(device))
            return MemoryCheck(needed, int(free), f"{MEMORY_FACTOR}x the weights file vs. torch.cuda.mem_get_info "
                                                  f"on {device}")
        import psutil

        return MemoryCheck(needed, int(psutil.virtual_memory().available),
                           f"{MEMORY_FACTOR}x the weights file vs. available memory (psutil)")

    def _settings_for(self, name: str, path: Path) -> Settings:
        own = named_settings(self.settings, self.catalog, name)  # as GET /models reports it (requested_runtime)
        return own.model_copy(update={"weights": path, "model_name": name, "models_dir": self.folder,
                                      "warmup_iters": min(1, self.settings.warmup_iters)})

    def build(self, name: str, path: Path) -> InferenceEngine:
        """Provisioned (loaded, built, gated) on a thread at nice +10, so the serving engines keep
        the machine; then opened again and started on the calling thread, at the usual priority,
        so the threads that will serve (the engine's workers, the runtime's pools) do not inherit
        the loader's nice value for good (``reopen`` in app/inference/precision/provision.py)."""
        from app.flow.modelswap import low_priority
        from app.wiring.runtime import build_engine, build_pipeline, provision_served, reopen_served, resolve_runtime

        own = self._settings_for(name, path)
        choice, provisioned = low_priority(lambda: provision_served(own, resolve_runtime(own)))
        provisioned.detector.close()  # its runtime threads were made at nice +10
        gc.collect()
        provisioned.detector.release_cache()  # that copy's memory back before the second one is made
        engine = build_engine(own, build_pipeline(own, reopen_served(own, choice, provisioned)), self.metrics)
        engine.start()
        try:
            engine.warmup(own.warmup_iters)
        except BaseException:
            self.free(engine)
            raise
        engine.mark_ready()
        return engine

    def free(self, engine: InferenceEngine) -> None:
        engine.begin_drain()
        engine.stop()
        engine.pipeline.detector.close()  # drops the model, empties the allocator cache / trims the heap
        gc.collect()
        engine.pipeline.detector.release_cache()


def install_model_switch(state: AppState, settings: Settings, catalog: Catalog | None, metrics: Metrics,
                         observers: Sequence[SwitchObserver] = ()) -> ModelSwitch:
    """``state.switch``: the admin routes' runtime changes over this service's models. After each
    change: the shadow reference follows a swap of the default model (app/wiring/shadow_follow.py),
    then ``observers`` (the replicas' sync, app/wiring/model_sync.py)."""
    from app.wiring.models import default_settings
    from app.wiring.shadow_follow import ShadowFollower

    follower = ShadowFollower(default_settings(settings, catalog), state, metrics)
    switch = ModelSwitch(state.models, RuntimeModels(settings, catalog, state, metrics),
                         observer=SwitchObservers([follower, *observers]))
    state.switch.put(switch)
    return switch
