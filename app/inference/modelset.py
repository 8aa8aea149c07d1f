"""``ModelSet``: the models this process serves, by name, the default first (issue 41).

Each name has its own engine (its own queue, batching and admission: one slow model cannot
starve another) in its own ``Slot``: where that name's traffic goes. Requests read the slot
once and keep the engine they got, holding a lease on it until they are answered
(app/inference/leases.py), so a request in flight finishes on the engine it started on and a
swapped-out engine is freed only after its last request. Two ways to change what a name serves, both atomic for readers:

- ``slot.put(engine)``: the engine behind a name (at startup once it is loaded and warm; a
  later swap of the weights puts the new engine there and drains the old one);
- ``replace(entry)``: the entry itself (weights, classes) swapped whole under the set's lock,
  copy-on-write, so a reader never sees half of an old entry and half of a new one.

Without a models file (CAMPUSGUARD_MODELS_FILE) the set holds one model, the weights of
CAMPUSGUARD_WEIGHTS, and the service behaves as it always did.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from app.core.errors import InvalidParameter, ServiceError, shorten
from app.core.slot import Slot
from app.inference.engine import InferenceEngine


class UnknownModel(ServiceError):
    """A model name this service does not serve (``?model=``, /v1/vision/custom/{model})."""

    status, code = 404, "unknown_model"


class ModelMismatch(InvalidParameter):
    """``?model=`` names another model than the one the camera of ``camera_id`` uses."""

    code = "model_mismatch"


@dataclass(frozen=True, slots=True)
class ServedModel:
    """One served model: its name, where its weights are, the runtime it was asked for, the
    classes it detects and the slot of its engine (None while it loads)."""

    name: str
    weights: Path
    backend: str = "auto"  # as requested (the models file, else CAMPUSGUARD_BACKEND); served: the detector's
    precision: str = "auto"
    classes: Mapping[int, str] | None = None  # from the model's metadata; None: known once it is loaded
    slot: Slot[InferenceEngine | None] = field(default_factory=lambda: Slot[InferenceEngine | None](None))

    @property
    def engine(self) -> InferenceEngine | None:
        return self.slot.get()

    def class_names(self) -> Mapping[int, str] | None:
        """The classes it detects: from its metadata, or from the loaded detector; None before either."""
        if self.classes is not None:
            return self.classes
        engine = self.slot.get()
        return engine.pipeline.detector.names if engine is not None else None

    @property
    def state(self) -> str:
        """``loading`` (no engine yet), ``ready``, or ``unavailable`` (loaded, but warming up, draining,
        its worker restarting or its watchdog tripped)."""
        engine = self.slot.get()
        return "loading" if engine is None else "ready" if engine.ready else "unavailable"


# name -> (backend, precision) the configuration asks for a model of that name (app/wiring/models.py)
RequestedRuntime = Callable[[str], tuple[str, str]]


class ModelSet:
    """Name -> ``ServedModel``, in the models file's order; the first is the default. ``requested``:
    what the configuration asks for a name added at runtime (``add``)."""

    def __init__(self, models: Iterable[ServedModel], requested: RequestedRuntime | None = None) -> None:
        entries: dict[str, ServedModel] = {}
        for model in models:
            if model.name in entries:
                raise ValueError(f"model {model.name!r} is named twice")
            entries[model.name] = model
        if not entries:
            raise ValueError("a model set needs at least one model")
        self._entries = entries
        self._requested = requested
        self._lock = threading.Lock()

    @classmethod
    def single(cls, name: str, weights: Path | str = "", slot: Slot[InferenceEngine | None] | None = None,
               ) -> ModelSet:
        """One model (no models file), whose engine is ``slot``'s."""
        return cls([ServedModel(name, Path(weights), slot=slot or Slot[InferenceEngine | None](None))])

    @property
    def default(self) -> str:
        return next(iter(self._entries))

    def names(self) -> list[str]:
        return list(self._entries)

    def all(self) -> list[ServedModel]:
        return list(self._entries.values())

    def find(self, name: str) -> ServedModel | None:
        return self._entries.get(name)

    def get(self, name: str) -> ServedModel:
        """The model called ``name``, or UnknownModel (404) listing the names served."""
        model = self._entries.get(name)
        if model is None:
            raise UnknownModel(f"unknown model {shorten(name)}; this service serves {', '.join(self._entries)} "
                               "(GET /models)")
        return model

    def engine(self, name: str) -> InferenceEngine | None:
        return self.get(name).engine

    def engines(self) -> list[InferenceEngine]:
        return [m.engine for m in self._entries.values() if m.engine is not None]

    def replace(self, model: ServedModel) -> ServedModel:
        """Put ``model`` in place of the entry of its name (atomic for readers); the old entry back."""
        with self._lock:
            old = self.get(model.name)
            entries = dict(self._entries)
            entries[model.name] = model
            self._entries = entries
        return old

    def add(self, model: ServedModel) -> None:
        """A new name, served last (a runtime load); ValueError if the name is served already. Its
        ``backend`` and ``precision`` become what ``requested`` says the configuration asks for that
        name (its models-file entry, else the service's settings: what the loader builds it with),
        so GET /models reports what was asked, as for the models loaded at startup, not ``auto``."""
        if self._requested is not None:
            backend, precision = self._requested(model.name)
            model = dataclasses.replace(model, backend=backend, precision=precision)
        with self._lock:
            if model.name in self._entries:
                raise ValueError(f"model {model.name!r} is served already")
            self._entries = {**self._entries, model.name: model}

    def remove(self, name: str) -> ServedModel:
        """Stop serving ``name`` (a runtime unload; never the default): its entry back."""
        with self._lock:
            old = self.get(name)
            if name == self.default:
                raise ValueError(f"model {name!r} is the default: it cannot be removed")
            self._entries = {key: value for key, value in self._entries.items() if key != name}
        return old
