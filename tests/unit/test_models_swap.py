"""Load, swap and unload at runtime (issue 41 part 3), in process over fake engines: a request
in flight finishes on the engine it started on while the traffic moves to the new one, the old
engine is drained and freed, every refusal (unknown name, a path outside the models folder, a
corrupt file, classes a camera's rules need, too little memory, the default or a camera's model
unloaded) changes nothing, and every change and refusal is in the audit trail."""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.api.access import Gate
from app.api.errors import install_error_handlers
from app.api.routes import detect, model_admin, models
from app.config import Settings
from app.core.audit import AuditEntry
from app.core.metrics import Metrics
from app.core.roles import Keyring
from app.flow.models import ModelRouter
from app.flow.modelswap import ModelSwitch
from app.inference.catalog import class_names, parse_models
from app.inference.engine import InferenceEngine
from app.inference.modelset import ModelSet, ServedModel
from app.rules.site.loader import parse_site_text
from app.wiring import model_admin as wiring_admin
from app.wiring.models import build_model_set
from tests.support.fakes import FakeDetector, make_engine
from tests.support.inprocess import png
from tests.support.models import write_onnx_names
from tests.support.net import free_port
from tests.support.state import install_state

COCO = {0: "person", 1: "car"}
CAMPUS = {0: "student", 1: "vehicle"}
ADMIN, VIEWER = "admin-key-0123456789", "viewer-key-0123456789"


class GatedDetector(FakeDetector):
    """A fake detector whose inference waits for ``release`` once ``gated`` is set: a request
    held in flight while the swap happens."""

    def __init__(self, names: dict[int, str]) -> None:
        super().__init__(names=names)
        self.gated, self.release, self.entered = threading.Event(), threading.Event(), threading.Event()
        self.closed = False

    def infer(self, batch: np.ndarray) -> np.ndarray:
        if self.gated.is_set():
            self.entered.set()
            assert self.release.wait(10)
        return super().infer(batch)

    def close(self) -> None:
        self.closed = True


class FakeRuntime(wiring_admin.RuntimeModels):
    """The real loader's checks (models folder, classes from the file's metadata, the site's rules,
    the memory estimate) over fake engines: a weights file's classes name the fake's classes."""

    def __init__(self, settings: Settings, state, metrics: Metrics) -> None:
        super().__init__(settings, None, state, metrics)
        self.built: list[InferenceEngine] = []
        self.freed: list[InferenceEngine] = []

    def build(self, name: str, path: Path) -> InferenceEngine:
        engine = make_engine(GatedDetector(self.classes_of(path)))
        self.built.append(engine)
        return engine

    def free(self, engine: InferenceEngine) -> None:
        self.freed.append(engine)
        super().free(engine)


class Recording:
    enabled = True

    def __init__(self) -> None:
        self.entries: list[AuditEntry] = []

    def record(self, entry: AuditEntry) -> None:
        self.entries.append(entry)

    def page(self, **_):  # pragma: no cover - not read here
        return [], None


@pytest.fixture()
def env(tmp_path: Path):
    folder = tmp_path / "models"
    folder.mkdir()
    for name, classes in (("coco.onnx", COCO), ("campus.onnx", CAMPUS), ("coco-v2.onnx", COCO)):
        write_onnx_names(folder / name, classes)
    (folder / "broken.onnx").write_bytes(b"not a model at all")
    (tmp_path / "outside.onnx").write_bytes((folder / "coco.onnx").read_bytes())
    first = make_engine(GatedDetector(COCO))
    router = ModelRouter(ModelSet([ServedModel("coco", folder / "coco.onnx", classes=COCO)]), {"plaza": "coco"})
    app = FastAPI()
    install_error_handlers(app)
    for module in (detect, models, model_admin):
        app.include_router(module.router)
    gate = Gate.of(Keyring.parse((f"admin:{ADMIN}", f"viewer:{VIEWER}")))
    audit = Recording()
    gate.audit.put(audit)
    site = parse_site_text("cameras:\n  - id: plaza\n    zones:\n      - name: all\n"
                           "        polygon: [[0, 0], [1, 0], [1, 1], [0, 1]]\n"
                           "        rules: [{type: intrusion, classes: [person]}]\n")
    rules = SimpleNamespace(enabled=True, config=site, evaluate=lambda *a, **k: [])
    state = install_state(app, engine=first, models=router, gate=gate)
    state.rules.put(rules)  # type: ignore[arg-type]
    metrics = Metrics()
    loader = FakeRuntime(Settings(weights=folder / "coco.onnx", models_dir=folder), state, metrics)
    switch = ModelSwitch(router, loader, drain_max_s=10)
    state.switch.put(switch)
    with TestClient(app, raise_server_exceptions=False, headers={"X-API-Key": ADMIN}) as client:
        yield SimpleNamespace(client=client, router=router, switch=switch, loader=loader, audit=audit,
                              first=first, folder=folder, tmp=tmp_path, state=state, app=app)
    for engine in [first, *loader.built]:
        engine.pipeline.detector.release.set()
        engine.begin_drain()
        engine.stop()


def labels(reply: dict) -> list[str]:
    return [d["class_name"] for d in reply["detections"]]


def post_frame(client: TestClient, **params: str) -> dict:
    r = client.post("/detect", params=params, files={"image": ("a.png", png(), "image/png")})
    assert r.status_code == 200, r.text
    return r.json()


def without_rules(env) -> None:
    """No camera rules name ``person``: a swap to other classes is allowed."""
    env.state.rules.put(SimpleNamespace(enabled=False, config=None, evaluate=lambda *a, **k: []))


def test_a_request_in_flight_finishes_on_the_old_engine_while_the_swap_moves_traffic(env):
    without_rules(env)
    assert labels(post_frame(env.client)) == ["person"]
    old = env.first.pipeline.detector
    old.gated.set()
    held: dict = {}
    thread = threading.Thread(target=lambda: held.update(reply=post_frame(env.client)))
    thread.start()
    assert old.entered.wait(5)  # the request is inside the old engine's inference now
    r = env.client.put("/admin/models/coco", json={"weights": "campus.onnx"})
    if r.status_code != 200:
        old.release.set()
        thread.join(10)
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["previous_weights"] == "coco.onnx" and body["model"]["weights"] == "campus.onnx"
    assert body["model"]["classes"] == ["student", "vehicle"] and body["model"]["change"] == "draining"
    new = env.router.models.engine("coco")
    assert new is env.loader.built[0] and new is not env.first
    assert labels(post_frame(env.client)) == ["student"]  # new requests: the new engine, at once
    listed = env.client.get("/models").json()["models"][0]
    assert listed["change"] == "draining" and listed["state"] == "ready"
    assert env.loader.freed == []  # the old engine still holds a request: not freed
    old.release.set()
    thread.join(10)
    assert labels(held["reply"]) == ["person"]  # finished on the engine it started on
    assert env.switch.wait_drained("coco", 10)
    assert env.loader.freed == [env.first] and old.closed and env.first.state.draining
    after = env.client.get("/models").json()["models"][0]
    assert after["change"] is None and after["weights"] == "campus.onnx"
    records = [(e.action, e.target, e.before, e.after, e.outcome) for e in env.audit.entries]
    assert records == [("model.swap", "coco", "coco.onnx", "campus.onnx", "ok")]


def test_the_sha_in_the_models_document_shows_a_swap(env):
    without_rules(env)
    before = env.client.get("/models").json()["models"][0]
    assert env.client.put("/admin/models/coco", json={"weights": "campus.onnx"}).status_code == 200
    after = env.client.get("/models").json()["models"][0]
    assert before["weights_sha256"] != after["weights_sha256"] and before["weights"] != after["weights"]


@pytest.mark.parametrize(("weights", "status", "code", "says"), [
    ("../outside.onnx", 422, "invalid_weights", "inside the models folder"),
    ("missing.onnx", 422, "invalid_weights", "no such file"),
    ("broken.onnx", 422, "invalid_weights", "not an ONNX model"),
    ("campus.onnx", 409, "model_classes_mismatch", "cameras[0].zones[0].rules[0].classes"),
])
def test_a_bad_swap_is_refused_and_changes_nothing(env, weights: str, status: int, code: str, says: str):
    r = env.client.put("/admin/models/coco", json={"weights": weights})
    assert r.status_code == status and r.json()["error"] == code and says in r.json()["message"], r.text
    assert env.router.models.engine("coco") is env.first and env.router.models.get("coco").weights.name == "coco.onnx"
    assert env.loader.built == [] and env.switch.phase("coco") is None
    assert labels(post_frame(env.client)) == ["person"]
    assert [(e.action, e.outcome, e.after) for e in env.audit.entries] == [("model.swap", "refused", code)]


def test_an_unknown_name_is_a_404_and_a_viewer_may_not_change_models(env):
    r = env.client.put("/admin/models/nope", json={"weights": "coco-v2.onnx"})
    assert r.status_code == 404 and r.json()["error"] == "unknown_model"
    viewer = env.client.put("/admin/models/coco", json={"weights": "coco-v2.onnx"}, headers={"X-API-Key": VIEWER})
    assert viewer.status_code == 403
    assert env.client.delete("/admin/models/nope").status_code == 404
    assert env.loader.built == [] and env.router.models.names() == ["coco"]


def test_too_little_memory_for_a_second_copy_is_refused_before_anything_loads(env, monkeypatch):
    monkeypatch.setattr(wiring_admin, "MEMORY_FACTOR", 1 << 50)  # the estimate far above any free memory
    r = env.client.put("/admin/models/coco", json={"weights": "coco-v2.onnx"})
    assert r.status_code == 409 and r.json()["error"] == "not_enough_memory", r.text
    assert "MiB are free" in r.json()["message"] and "available memory (psutil)" in r.json()["message"]
    assert env.loader.built == [] and env.router.models.engine("coco") is env.first
    r = env.client.post("/admin/models", json={"name": "campus", "weights": "campus.onnx"})
    assert r.status_code == 409 and env.router.models.names() == ["coco"]


def test_load_and_unload_a_model_at_runtime(env):
    r = env.client.post("/admin/models", json={"name": "campus", "weights": "campus.onnx"})
    assert r.status_code == 201, r.text
    assert r.json()["model"]["state"] == "ready" and r.json()["model"]["classes"] == ["student", "vehicle"]
    assert labels(post_frame(env.client, model="campus")) == ["student"]
    assert [m["name"] for m in env.client.get("/models").json()["models"]] == ["coco", "campus"]
    again = env.client.post("/admin/models", json={"name": "campus", "weights": "campus.onnx"})
    assert again.status_code == 409 and again.json()["error"] == "model_exists"
    bad = env.client.post("/admin/models", json={"name": "../x", "weights": "campus.onnx"})
    assert bad.status_code == 422 and bad.json()["error"] == "invalid_model_name"
    corrupt = env.client.post("/admin/models", json={"name": "other", "weights": "broken.onnx"})
    assert corrupt.status_code == 422 and env.router.models.names() == ["coco", "campus"]
    r = env.client.delete("/admin/models/campus")
    assert r.status_code == 200 and env.router.models.names() == ["coco"]
    assert env.client.post("/detect", params={"model": "campus"},
                           files={"image": ("a.png", png(), "image/png")}).status_code == 404
    assert env.switch.wait_drained("campus", 10) and env.loader.freed == [env.loader.built[0]]
    actions = [(e.action, e.target, e.outcome) for e in env.audit.entries]
    assert actions == [("model.load", "campus", "ok"), ("model.load", "campus", "refused"),
                       ("model.load", "../x", "refused"), ("model.load", "other", "refused"),
                       ("model.unload", "campus", "ok")]


def test_a_model_loaded_at_runtime_reports_the_runtime_asked_for_it(env):
    """GET /models's requested_backend / requested_precision of a runtime load are what the loader
    builds it with, as for the models of the startup: its models-file entry's, else the service's
    settings (they read ``auto`` whatever was asked), and a swap keeps them."""
    settings = Settings(weights=env.folder / "coco.onnx", models_dir=env.folder, backend="onnx", precision="fp32")
    catalog = parse_models(b"models:\n  - {name: coco, weights: coco.onnx}\n"
                           b"  - {name: campus, weights: campus.onnx, backend: openvino, precision: int8}\n",
                           "models.yaml", env.folder, class_names)
    env.router.models = build_model_set(settings, catalog, env.router.models.get("coco").slot)
    assert env.client.delete("/admin/models/campus").status_code == 200  # the file's model, unloaded...
    assert env.client.post("/admin/models", json={"name": "campus", "weights": "campus.onnx"}).status_code == 201
    assert env.client.post("/admin/models", json={"name": "extra", "weights": "coco.onnx"}).status_code == 201
    assert env.client.put("/admin/models/extra", json={"weights": "coco-v2.onnx"}).status_code == 200

    def requested() -> dict[str, tuple[str, str]]:
        return {m["name"]: (m["requested_backend"], m["requested_precision"])
                for m in env.client.get("/models").json()["models"]}

    # ...and loaded again: its entry's runtime; a name the file does not list: the service's settings
    assert requested() == {"coco": ("onnx", "fp32"), "campus": ("openvino", "int8"), "extra": ("onnx", "fp32")}


def test_the_default_and_a_model_a_camera_uses_cannot_be_unloaded(env):
    r = env.client.delete("/admin/models/coco")
    assert r.status_code == 409 and r.json()["error"] == "model_in_use" and "default" in r.json()["message"]
    assert env.client.post("/admin/models", json={"name": "campus", "weights": "campus.onnx"}).status_code == 201
    env.router.assign({"plaza": "coco", "gate-1": "campus", "gate-2": "campus"})
    r = env.client.delete("/admin/models/campus")
    assert r.status_code == 409 and "gate-1, gate-2" in r.json()["message"]
    assert env.router.models.names() == ["coco", "campus"] and env.loader.freed == []


def test_one_change_of_a_name_at_a_time(env):
    old = env.first.pipeline.detector
    old.gated.set()
    thread = threading.Thread(target=lambda: post_frame(env.client))
    thread.start()
    assert old.entered.wait(5)
    swapped = env.client.put("/admin/models/coco", json={"weights": "coco-v2.onnx"})
    if swapped.status_code != 200:
        old.release.set()
    assert swapped.status_code == 200, swapped.text
    busy = env.client.put("/admin/models/coco", json={"weights": "coco.onnx"})  # the old one still drains
    assert busy.status_code == 409 and busy.json()["error"] == "model_busy"
    old.release.set()
    thread.join(10)
    assert env.switch.wait_drained("coco", 10)
    assert env.client.put("/admin/models/coco", json={"weights": "coco.onnx"}).status_code == 200


def wait_for(check, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_request_still_uploading_its_body_keeps_the_old_engine_past_any_quiet_time(env):
    """The engine is taken (and leased) before the body is read: a client that sends half its
    frame, waits while the weights are swapped and the old engine has nothing queued for longer
    than the drain's former quiet time (1 s), then sends the rest, is answered by the old engine;
    the old engine is freed only once that request has its answer."""
    import uvicorn

    without_rules(env)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(env.app, host="127.0.0.1", port=port, log_level="warning",
                                           access_log=False, lifespan="off"))
    thread = threading.Thread(target=server.run, name="lease-test-server", daemon=True)
    thread.start()
    assert wait_for(lambda: server.started, 20)
    body = png()
    head = (f"POST /detect HTTP/1.1\r\nHost: 127.0.0.1\r\nX-API-Key: {ADMIN}\r\nContent-Type: image/png\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
            sock.sendall(head + body[:len(body) // 2])
            assert wait_for(lambda: env.first.leases.held == 1)  # the route holds the engine, its body half read
            r = env.client.put("/admin/models/coco", json={"weights": "campus.onnx"})
            assert r.status_code == 200, r.text
            assert labels(post_frame(env.client)) == ["student"]  # new requests: the new engine
            time.sleep(1.5)  # the old engine idle for longer than the former quiet time
            assert env.loader.freed == [] and env.switch.phase("coco") == "draining"
            assert env.first.ready and env.first.leases.held == 1
            sock.sendall(body[len(body) // 2:])
            reply = b""
            while chunk := sock.recv(65536):
                reply += chunk
        status, _, payload = reply.partition(b"\r\n\r\n")
        assert status.startswith(b"HTTP/1.1 200"), reply[:300]
        assert labels(json.loads(payload)) == ["person"]  # answered by the engine it started on
        assert env.switch.wait_drained("coco", 10)
        assert env.loader.freed == [env.first] and env.first.leases.held == 0 and env.first.leases.retired
    finally:
        server.should_exit = True
        thread.join(10)


def test_a_lease_on_a_retired_engine_takes_the_new_one_and_never_leaks(env):
    """The race a count alone would lose: a request read the slot just before the switch, and the
    drain retired the old engine before the request took its lease: it gets the slot's new engine.
    A lease is given back when its block raises."""
    other = make_engine(GatedDetector(COCO))
    try:
        env.router.models.get("coco").slot.put(other)
        assert env.first.leases.retire(lambda: env.first.idle)
        with env.router.lease("coco", env.first) as got:
            assert got is other and other.leases.held == 1 and env.first.leases.held == 0
        assert other.leases.held == 0
        with pytest.raises(RuntimeError), env.router.lease("coco") as got:
            assert got is other and other.leases.held == 1
            raise RuntimeError("the route failed")
        assert other.leases.held == 0 and not other.leases.retired
    finally:
        other.stop()


def test_a_drain_that_runs_out_of_time_frees_the_engine_and_says_so(env, caplog):
    without_rules(env)
    switch = ModelSwitch(env.router, env.loader, drain_max_s=0.3)
    with env.router.lease("coco") as held:
        assert held is env.first
        with caplog.at_level(logging.WARNING, logger="campusguard.models"):
            switch.swap("coco", "campus.onnx")
            assert switch.wait_drained("coco", 10)
        assert env.loader.freed == [env.first] and env.first.state.draining
    assert "still in use after 0.3 s (1 request(s) holding it)" in caplog.text
    assert env.first.leases.held == 0
