"""``ModelSwitch``: load, swap and unload a served model at runtime (issue 41 part 3, docs/models.md).

A swap never leaves a name without an engine and never changes anything before it is sure:

1. the new weights are checked first (inside the models folder, classes readable, classes
   still those of every rule of the cameras on that model, memory for a second copy): any
   refusal is a 4xx and nothing has changed;
2. the new engine is built, gated and warmed beside the old one by the loader, which does the
   heavy part at a lower CPU priority (``low_priority``: nice +10 on Linux) and opens the model
   that will serve at the usual one (threads inherit their creator's nice value, and the
   runtime's pools and the engine's workers must not serve at +10);
3. traffic moves atomically: the entry (weights, classes) and the slot's engine are replaced
   under the set's lock; a request reads the slot once (``FrameFlow`` keeps its engine), so
   a request in flight finishes on the engine it started on;
4. the old engine drains on a background thread: every request that read it from the slot
   holds a lease until its frame is answered (app/inference/leases.py; one still uploading its
   body for seconds included), and once no lease is held and nothing is admitted, queued or in
   inference, the engine is retired (a late reader takes the new engine instead), stopped and
   its detector closed (model dropped, allocator cache emptied). After ``drain_max_s`` it is
   freed anyway, with a warning naming the requests still holding it (they get 503).

What builds an engine, reads classes, checks the site's rules and estimates memory is the
composition root's (``ModelLoader``, app/wiring/model_admin.py): this module only orders the steps.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol, TypeVar

from app.core.errors import ServiceError, shorten
from app.flow.modelchanges import ModelChange, NoSwitchObserver, SwitchObserver
from app.flow.models import ModelRouter
from app.inference.catalog import NAME_RE
from app.inference.engine import InferenceEngine
from app.inference.modelset import ServedModel

log = logging.getLogger("campusguard.models")
T = TypeVar("T")


class InvalidWeights(ServiceError):
    """The weights named are not a model this service can serve (outside the models folder, missing, corrupt)."""

    status, code = 422, "invalid_weights"


class ModelConflict(ServiceError):
    """The change conflicts with what is served: see the message."""

    status, code = 409, "model_in_use"


class NotEnoughMemory(ServiceError):
    """Too little free memory to hold a second copy of the model while the first still serves."""

    status, code = 409, "not_enough_memory"


class ModelsReadOnly(ServiceError):
    """Runtime model changes are not available in this process."""

    status, code = 503, "models_admin_unavailable"


@dataclasses.dataclass(frozen=True, slots=True)
class MemoryCheck:
    """What a second copy needs and what is free, in bytes, and how both were measured."""

    needed: int
    free: int
    how: str


@dataclasses.dataclass(frozen=True, slots=True)
class Candidate:
    """New weights checked and loaded beside the serving engine, not serving yet."""

    path: Path
    classes: dict[int, str]
    engine: InferenceEngine


class ModelLoader(Protocol):
    """The composition root's side of a runtime change (it knows the settings and the rules)."""

    def confine(self, weights: str) -> Path:
        """The weights' path inside the models folder; ValueError naming why not."""

    def classes_of(self, path: Path) -> dict[int, str]:
        """The model's classes from its metadata; ValueError when the file is not a model."""

    def check_classes(self, name: str, classes: Mapping[int, str]) -> list[str]:
        """The site file's problems if model ``name`` detected ``classes`` (empty: none)."""

    def memory(self, path: Path) -> MemoryCheck:
        """The memory a copy of ``path`` needs and the memory free now."""

    def build(self, name: str, path: Path) -> InferenceEngine:
        """An engine over ``path``: loaded, gated, warmed, started and ready. Called at the usual
        priority: the heavy part belongs in ``low_priority``, what will serve is made outside it."""

    def free(self, engine: InferenceEngine) -> None:
        """Stop a drained engine and give its memory back."""


class NoModelLoader:
    """Without the composition root's loader (tools, tests): every change is refused, 503."""

    def _refuse(self, *_: object) -> object:
        raise ModelsReadOnly("runtime model changes are not available in this process")

    confine = classes_of = check_classes = memory = build = _refuse

    def free(self, engine: InferenceEngine) -> None:
        engine.begin_drain()
        engine.stop()


def low_priority(work: Callable[[], T], niceness: int = 10) -> T:
    """``work()`` on a thread of its own at a lower CPU priority (Linux threads have their own nice
    value), so loading a model beside the serving one does not slow the requests; its result or
    its exception comes back to the caller. Every thread ``work`` creates inherits that nice value
    for good (an unprivileged process cannot lower it again): nothing made here may serve."""
    box: dict[str, object] = {}

    def run() -> None:
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), niceness)
        except (OSError, AttributeError):  # not Linux, or not permitted: load at the usual priority
            pass
        try:
            box["value"] = work()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    thread = threading.Thread(target=run, name="campusguard-model-load", daemon=True)
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["value"]  # type: ignore[return-value]


class ModelSwitch:
    """Runtime changes of the served models: one change per name at a time (409 ``model_busy``)."""

    def __init__(self, router: ModelRouter, loader: ModelLoader, drain_max_s: float = 60.0, poll_s: float = 0.05,
                 observer: SwitchObserver = NoSwitchObserver()) -> None:  # noqa: B008 - a stateless null object
        self.router, self.loader = router, loader
        self.observer = observer  # told of each change once it is made (app/flow/modelchanges.py)
        self.drain_max_s, self.poll_s = drain_max_s, poll_s
        self._lock = threading.Lock()
        self._busy: set[str] = set()
        self._phases: dict[str, str] = {}  # name -> loading (a new engine beside the old) / draining (the old one)
        self._drains: dict[str, threading.Thread] = {}
        self._held: set[str] = set()  # names a rollout holds (app/flow/rollout.py)

    def phase(self, name: str) -> str | None:
        """``loading`` or ``draining`` while a change of ``name`` is under way, else None."""
        return self._phases.get(name)

    # --- the three changes -----------------------------------------------------------
    def load(self, name: str, weights: str) -> ServedModel:
        """Serve a new name from ``weights`` (after the others; the default stays)."""
        if not re.match(NAME_RE, name or ""):
            raise InvalidWeights(f"name {shorten(name)}: 1-64 characters, a letter or digit, then letters, "
                                 "digits, _ . -", code="invalid_model_name")
        if name == "list":
            raise InvalidWeights("name 'list': /v1/vision/custom/list is the list route", code="invalid_model_name")
        if self.router.models.find(name) is not None:
            raise ModelConflict(f"model {name!r} is served already (PUT /admin/models/{name} replaces its weights)",
                                code="model_exists")
        with self._change(name):
            path, classes = self._checked(name, weights)
            entry = ServedModel(name, path, classes=classes)
            self.router.models.add(entry)  # state loading: GET /models shows it, requests get 503 not_ready
            try:
                engine = self._build(name, path)
            except BaseException:
                self.router.models.remove(name)
                raise
            entry.slot.put(engine)
            log.info("model %s loaded from %s", name, path)
            self.observer.changed(ModelChange("load", name, None, entry))
            return entry

    def swap(self, name: str, weights: str) -> tuple[ServedModel, ServedModel]:
        """Replace the weights behind ``name``: the (old, new) entries; the old engine drains after."""
        self.router.models.get(name)  # 404 unknown_model
        with self._change(name):
            candidate = self._prepare(name, weights)
            return self._serve(name, candidate)

    # --- a rollout's steps (app/flow/rollout.py): load beside, serve later or free -----
    def candidate(self, name: str, weights: str) -> Candidate:
        """Check and load ``weights`` beside ``name``'s engine without serving them (a rollout's
        candidate): the swap's checks and refusals, then the name is held for the rollout (a swap
        or unload of it is refused 409 ``model_busy`` until ``release``)."""
        self.router.models.get(name)  # 404 unknown_model
        with self._change(name):
            candidate = self._prepare(name, weights)
            with self._lock:
                self._held.add(name)
            return candidate

    def adopt(self, name: str, candidate: Candidate) -> tuple[ServedModel, ServedModel]:
        """Serve a candidate built by ``candidate`` behind ``name`` (a promotion), as a swap's last
        step: no second load; the old engine drains and is freed. The name stays held."""
        return self._serve(name, candidate)

    def retire(self, name: str, engine: InferenceEngine) -> None:
        """Drain and free an engine that no longer serves (a rolled-back candidate): requests in
        flight on it finish first."""
        self._drain(name, engine)

    def release(self, name: str) -> None:
        """The rollout of ``name`` ended: its changes are accepted again."""
        with self._lock:
            self._held.discard(name)

    def unload(self, name: str) -> ServedModel:
        """Stop serving ``name`` (never the default, nor a model a camera uses); its engine drains."""
        entry = self.router.models.get(name)  # 404
        if name == self.router.default:
            raise ModelConflict(f"model {name!r} is the default (the first of the models file): it cannot be "
                                "unloaded; swap its weights instead")
        cameras = self.router.cameras_of(name)
        if cameras:
            raise ModelConflict(f"model {name!r} is used by camera(s) {', '.join(cameras)}: move them to another "
                                "model in the site file first")
        with self._change(name):
            self.router.models.remove(name)
            engine = entry.slot.get()
            if engine is not None:
                self._drain(name, engine)
            log.info("model %s unloaded", name)
            self.observer.changed(ModelChange("unload", name, entry, None))
            return entry

    def wait_drained(self, name: str, timeout: float = 30.0) -> bool:
        """Block until the old engine of ``name`` is freed (tests, the benchmark); False on timeout."""
        thread = self._drains.get(name)
        if thread is not None:
            thread.join(timeout)
            return not thread.is_alive()
        return True

    # --- the steps -------------------------------------------------------------------
    @contextmanager
    def _change(self, name: str) -> Iterator[None]:
        """One change of ``name`` at a time, and none while its old engine still drains."""
        with self._lock:
            if name in self._held:
                raise ModelConflict(f"model {name!r} is being rolled out (GET /admin/models/{name}/rollout); "
                                    "promote or abort the rollout first", code="model_busy")
            if name in self._busy or name in self._phases:
                raise ModelConflict(f"model {name!r} is being changed already ({self._phases.get(name, 'loading')}); "
                                    "try again when GET /models shows no change", code="model_busy")
            self._busy.add(name)
        try:
            yield
        finally:
            with self._lock:
                self._busy.discard(name)

    def _checked(self, name: str, weights: str) -> tuple[Path, dict[int, str]]:
        """Every check before anything changes: the path, the classes, the site's rules, the memory."""
        try:
            path = self.loader.confine(weights)
            classes = self.loader.classes_of(path)
        except ValueError as exc:
            raise InvalidWeights(f"weights {shorten(weights, 200)}: {exc}") from None
        problems = self.loader.check_classes(name, classes)
        if problems:
            raise ModelConflict(f"the classes of {shorten(weights, 200)} ({', '.join(classes.values())[:300]}) do not "
                                f"match the site file's rules for model {name!r}: {'; '.join(problems)[:600]}",
                                code="model_classes_mismatch")
        check = self.loader.memory(path)
        if check.needed > check.free:
            raise NotEnoughMemory(f"loading {path.name} beside the serving copy needs about {check.needed >> 20} MiB, "
                                  f"{check.free >> 20} MiB are free ({check.how})")
        return path, classes

    def _prepare(self, name: str, weights: str) -> Candidate:
        """Checked, then built beside the serving engine (``change``: loading meanwhile)."""
        path, classes = self._checked(name, weights)
        self._phases[name] = "loading"
        try:
            engine = self._build(name, path)
        finally:
            self._phases.pop(name, None)
        return Candidate(path, classes, engine)

    def _serve(self, name: str, candidate: Candidate) -> tuple[ServedModel, ServedModel]:
        """The entry and its engine replaced together; the old engine drains after."""
        with self._lock:  # the entry and its engine move together
            current = self.router.models.get(name)
            new = dataclasses.replace(current, weights=candidate.path, classes=candidate.classes)
            old_engine = current.slot.get()
            self.router.models.replace(new)
            new.slot.put(candidate.engine)
        log.info("model %s now serves %s (was %s); the old engine drains", name, candidate.path, current.weights)
        if old_engine is not None:
            self._drain(name, old_engine)
        self.observer.changed(ModelChange("swap", name, current, new))  # a swap, or a rollout's promotion
        return current, new

    def _build(self, name: str, path: Path) -> InferenceEngine:
        try:
            return self.loader.build(name, path)
        except ServiceError:
            raise
        except Exception as exc:  # a file that reads as a model but does not load or run
            log.warning("model %s: %s did not load", name, path, exc_info=True)
            raise InvalidWeights(f"weights {path.name} did not load: {type(exc).__name__}: "
                                 f"{str(exc)[:300]}") from None

    def _drain(self, name: str, engine: InferenceEngine) -> None:
        self._phases[name] = "draining"

        def drain() -> None:
            try:
                deadline = time.monotonic() + self.drain_max_s
                while not engine.leases.retire(lambda: engine.idle):  # no lease held and nothing in the engine
                    if time.monotonic() >= deadline:
                        held = engine.leases.force_retire()
                        log.warning("model %s: the old engine was still in use after %g s (%d request(s) "
                                    "holding it); freed anyway, what it still had is answered 503", name,
                                    self.drain_max_s, held)
                        break
                    time.sleep(self.poll_s)
                self.loader.free(engine)
                log.info("model %s: the old engine drained and was freed", name)
            finally:
                if self._phases.get(name) == "draining":
                    self._phases.pop(name, None)

        thread = threading.Thread(target=drain, name=f"campusguard-drain-{name}", daemon=True)
        self._drains[name] = thread
        thread.start()
