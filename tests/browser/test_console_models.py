"""The console's Models page (issue 41 part 3) in a real Chromium against a real
`campusguard serve`: the real yolov8n from a models folder of the test's own (a copy of the
shared weights, and two copies whose class names are changed in their metadata), a copy of the
example site file (its rules name `person` and `car`), a viewer and an admin key.

The list, load, swap and unload run against the server; only the states a model passes through
too briefly to watch (loading, draining) are added to the server's real GET /models reply by
Playwright's route interception. The rollout (part 4) runs for real in test_console_rollout.py.
"""

from __future__ import annotations

import json
import re
import shutil
import time

import pytest

from tests.browser.conftest import (
    DESKTOP,
    PHONE,
    card,
    client,
    console_server,
    fact,
    goto_models,
    no_horizontal_overflow,
)
from tests.support.models import renamed_copy
from tests.support.rules_util import EXAMPLE_SITE

PlaywrightError = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the dev extra)").Error
pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]
KEYS = {"viewer": "models-view-key-1", "admin": "models-admin-key-1"}
MODELS = re.compile(r"/models$")  # GET /models only: the handler passes POST /admin/models on


@pytest.fixture(scope="module")
def server(tmp_path_factory, weights):
    tmp = tmp_path_factory.mktemp("console-models")
    folder = tmp / "models"
    folder.mkdir()
    shutil.copy(weights, folder / "yolov8n.pt")
    renamed_copy(weights, folder / "campus.pt", {0: "student"})
    renamed_copy(weights, folder / "campus-v2.pt", {0: "student", 2: "vehicle"})
    site = tmp / "site.yaml"
    shutil.copy(EXAMPLE_SITE, site)
    srv = console_server(tmp, folder / "yolov8n.pt", site, KEYS)
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def api(server):
    with client(server, KEYS["admin"], timeout=120) as http:  # a load answers once the model is warm
        yield http


def served(api) -> dict[str, dict]:
    r = api.get("/models")
    assert r.status_code == 200, r.text
    return {m["name"]: m for m in r.json()["models"]}


def ensure_campus(api) -> None:
    """campus served (an earlier test unloaded it: its old engine may still be draining)."""
    deadline = time.monotonic() + 90
    while "campus" not in served(api):
        r = api.post("/admin/models", json={"name": "campus", "weights": "campus.pt"})
        if r.status_code == 409 and r.json()["error"] == "model_busy" and time.monotonic() < deadline:
            time.sleep(0.5)
            continue
        assert r.status_code == 201, r.text


def test_a_viewer_sees_every_model_refreshed_and_no_admin_action(server, api, open_page, bus_jpg):
    page = open_page(server.url, KEYS["viewer"])
    goto_models(page)
    want = served(api)["yolov8n"]
    yolo = card(page, "yolov8n")
    assert yolo.locator(".model-head h2").inner_text() == "yolov8n"
    assert yolo.locator(".model-default").inner_text() == "default"
    assert fact(yolo, "State") == "Ready"
    assert fact(yolo, "Weights").startswith(f"yolov8n.pt · sha256 {want['weights_sha256']} · 6.")
    assert fact(yolo, "Runs on") == "torch · torch-cpu · fp32 · cpu" and fact(yolo, "Input shapes") == "320x320"
    assert fact(yolo, "Cameras") == ", ".join(want["cameras"]) and "gate-cam" in want["cameras"]
    assert fact(yolo, "Queue") == "0 waiting"
    classes = yolo.locator("details.classes")  # 80 classes: folded behind their count
    assert classes.locator("summary").inner_text().startswith("80 classes: person, bicycle, car")
    assert not classes.locator("p").is_visible()
    classes.locator("summary").click()
    assert "toothbrush" in classes.locator("p").inner_text()
    r = api.post("/detect", files={"image": ("bus.jpg", bus_jpg, "image/jpeg")})
    assert r.status_code == 200, r.text
    page.wait_for_function("() => /images\\/s/.test(document.querySelector(\"article.model[data-model='yolov8n']\")"
                           ".innerText)")
    assert re.fullmatch(r"\d+\.\d images/s · \d+ images? in total", fact(yolo, "Rate")), fact(yolo, "Rate")
    assert classes.get_attribute("open") is not None  # the refresh kept the unfolded list open
    for admin_only in ("#model-load", ".model-actions", "button.unload", "button.promote", "form.swap"):
        assert page.locator(admin_only).count() == 0, admin_only
    assert "need an admin key" in page.locator("#models-admin-note").inner_text()


def test_an_admin_loads_swaps_and_unloads_a_model_and_sees_the_refusals(server, api, open_page):
    page = open_page(server.url, KEYS["admin"])
    goto_models(page)
    load = page.locator("#model-load")
    result = page.locator("section.model-admin .result")
    load.get_by_label("Name").fill("campus")
    load.get_by_label("Weights file (in the models folder)").fill("../site.yaml")
    load.get_by_role("button", name="Load model").click()
    page.wait_for_selector("section.model-admin .result.error")
    text = result.inner_text()
    assert text.startswith("Refused: weights '../site.yaml': must be inside the models folder")
    assert "(422 invalid_weights)" in text
    assert list(served(api)) == ["yolov8n"]  # a refusal changes nothing

    load.get_by_label("Weights file (in the models folder)").fill("campus.pt")
    load.get_by_role("button", name="Load model").click()
    page.wait_for_selector("section.model-admin .result.ok")
    assert result.inner_text() == "Loaded: campus serves campus.pt (80 classes)."
    campus = card(page, "campus")
    campus.wait_for()
    assert fact(campus, "State") == "Ready" and fact(campus, "Cameras") == "none (requests naming it only)"
    assert campus.locator("details.classes summary").inner_text().startswith("80 classes: student, bicycle, car")
    assert campus.locator(".model-default").count() == 0
    assert page.locator("article.model").evaluate_all("els => els.map(e => e.dataset.model)") == ["yolov8n", "campus"]

    yolo = card(page, "yolov8n")  # the site's rules name `person`: weights without it are refused
    yolo.get_by_label("New weights file").fill("campus.pt")
    yolo.get_by_role("button", name="Swap weights").click()
    yolo.locator(".action-result.error").wait_for()
    refused = yolo.locator(".action-result").inner_text()
    assert refused.startswith("Refused: the classes of 'campus.pt'") and "(409 model_classes_mismatch)" in refused
    assert "cameras[0].zones[0].rules[0].classes: ['person']" in refused
    assert served(api)["yolov8n"]["weights"] == "yolov8n.pt"
    assert yolo.locator("button.unload").is_hidden()  # the default is swapped, never unloaded
    assert yolo.locator("details.rollout-start-box").is_visible()  # no rollout: one may start (test_console_rollout.py)
    assert yolo.locator("section.rollout").count() == 0 and yolo.locator("button.promote").is_hidden()

    campus.get_by_label("New weights file").fill("campus-v2.pt")
    for _ in range(2):  # a refresh drawn (the next one is asked for only after it) keeps what is being typed
        with page.expect_request(lambda r: r.method == "GET" and MODELS.search(r.url), timeout=10_000):
            pass
    assert campus.get_by_label("New weights file").input_value() == "campus-v2.pt"
    campus.get_by_role("button", name="Swap weights").click()
    campus.locator(".action-result.ok").wait_for()
    assert campus.locator(".action-result").inner_text() == (
        "Swapped: campus serves campus-v2.pt (was campus.pt); the old weights drain, then are freed.")
    now = served(api)["campus"]
    assert now["weights"] == "campus-v2.pt" and now["classes"][2] == "vehicle"
    page.wait_for_function("(sha) => document.querySelector(\"article.model[data-model='campus'] .sha\")"
                           ".textContent === sha", arg=now["weights_sha256"])
    assert campus.locator("details.classes summary").inner_text().startswith("80 classes: student, bicycle, vehicle")

    # one change of a name at a time: the old engine drains (at least 1 s idle) before campus may go
    page.wait_for_function("() => !document.querySelector(\"article.model[data-model='campus'] .model-change\")")
    unload = campus.get_by_role("button", name="Unload")
    unload.click()
    assert campus.locator("button.unload").inner_text() == "Really unload campus?"
    campus.get_by_role("button", name="Cancel").click()  # asked, then thought better of it
    assert campus.locator("button.unload").inner_text() == "Unload" and "campus" in served(api)
    campus.locator("button.unload").click()
    campus.locator("button.unload").click()
    campus.wait_for(state="detached")
    notice = page.locator("#models-notice").inner_text()
    assert notice == "Unloaded campus: its requests in flight finish, then it is freed."
    assert list(served(api)) == ["yolov8n"]
    actions = [a["action"] for a in api.get("/audit", params={"limit": 20}).json()["items"]]
    assert {"model.load", "model.swap", "model.unload"} <= set(actions)


class PatchedModels:
    """GET /models with some fields of some models replaced (``patches``: {name: {field: value}}):
    states the real server passes through too briefly to watch (a model loading, old weights
    draining)."""

    def __init__(self, page, patches: dict[str, dict]) -> None:
        self.patches = patches
        page.route(MODELS, self.models)

    def models(self, route) -> None:
        if route.request.method != "GET":
            route.fallback()
            return
        try:
            body = route.fetch().json()
        except PlaywrightError:  # the test ended and closed its page while a refresh was under way
            return
        for model in body["models"]:
            model.update(self.patches.get(model["name"], {}))
        route.fulfill(status=200, content_type="application/json", body=json.dumps(body))


def test_a_model_loading_and_one_draining_say_so(server, api, open_page):
    """GET /models while campus loads (a load: its change says nothing more than its state) and
    yolov8n serves new weights while its old ones drain (a swap): the states and changes in
    words, the loading model's runtime not known yet."""
    ensure_campus(api)
    page = open_page(server.url, KEYS["viewer"])
    loading = {"state": "loading", "change": "loading", "backend": None, "provider": None, "precision": None,
               "device": None, "shapes": None, "queue_depth": None, "images_per_s": None, "memory": None}
    PatchedModels(page, {"campus": loading, "yolov8n": {"change": "draining"}})
    goto_models(page)
    campus, yolo = card(page, "campus"), card(page, "yolov8n")
    assert fact(campus, "State") == "Loading"
    assert campus.locator(".model-loading").count() == 1 and campus.locator(".model-change").count() == 0
    asked = served(api)["campus"]
    want = f"requested {asked['requested_backend']} / {asked['requested_precision']} (not loaded yet)"
    assert fact(campus, "Runs on") == want
    assert fact(campus, "Rate") == "no batch yet" and fact(campus, "Device memory") == "n/a"
    assert fact(yolo, "State") == "Ready old weights draining"
    assert page.locator(".summary").inner_text().startswith("2 models served, default yolov8n, 1 not ready.")


@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_the_models_page_fits_desktop_and_phone(server, api, open_page, viewport):
    """Two cards, the classes unfolded (the rollout panel at phone width: test_console_rollout.py)."""
    ensure_campus(api)
    page = open_page(server.url, KEYS["admin"], viewport)
    goto_models(page)
    card(page, "campus").wait_for()
    card(page, "yolov8n").locator("details.classes summary").click()
    no_horizontal_overflow(page)
