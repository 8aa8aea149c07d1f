"""The console's Models page (issue 41 parts 3 and 4) in a real Chromium against a real
`campusguard serve`: the real yolov8n from a models folder of the test's own (a copy of the
shared weights, and two copies whose class names are changed in their metadata), a copy of the
example site file (its rules name `person` and `car`), a viewer and an admin key.

The list, load, swap and unload run against the server. The rollout routes are being built
beside this page (issue 41 part 4): the rollout panel is checked on a `rollout` object added
to the server's real GET /models reply by Playwright's route interception, and its buttons
against intercepted routes that record what the page sent (the contract in docs/console.md).
When the rollout routes land, these tests move to the real ones.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import re
import shutil
import time

import pytest

from tests.browser.conftest import DESKTOP, PHONE, client, console_server, screenshot
from tests.support.models import renamed_copy
from tests.support.rules_util import EXAMPLE_SITE

PlaywrightError = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the dev extra)").Error
pytestmark = [pytest.mark.browser, pytest.mark.timeout(240)]
KEYS = {"viewer": "models-view-key-1", "admin": "models-admin-key-1"}
SHOT = {"width": 1280, "height": 1000}  # the screenshots' window: a model card with its rollout chart whole
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


def goto_models(page) -> None:
    page.goto("/ui/#/models")
    page.wait_for_selector("body[data-ready=true]")
    page.locator("article.model").first.wait_for()


def card(page, name: str):
    return page.locator(f"article.model[data-model='{name}']")


def fact(scope, name: str) -> str:
    return scope.locator(f"dt:text-is('{name}') + dd").first.inner_text()


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


def no_horizontal_overflow(page) -> None:
    width, inner = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    assert width <= inner, f"page is {width} px wide in a {inner} px window"


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
    assert yolo.locator("details.rollout-start-box").is_hidden()  # this server has no rollouts (no `rollout` field)

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


def iso(at: dt.datetime) -> str:
    return at.isoformat().replace("+00:00", "Z")


def canary_rollout() -> dict:
    """A rollout of the default model's new weights in its canary phase, on two of its cameras,
    as GET /models will carry it (issue 41 part 4)."""
    start = dt.datetime.now(dt.timezone.utc) - dt.timedelta(minutes=14)
    history = [{"at": iso(start + dt.timedelta(minutes=i)), "phase": "shadow" if i < 6 else "canary",
                "agreement": a, "compared": 20 * (i + 1)}
               for i, a in enumerate([0.99, 0.985, 0.992, 0.978, 0.981, 0.987, 0.975, 0.969, 0.972, 0.966, 0.971])]
    return {"model": "yolov8n", "candidate_weights": "yolov8n-v2.pt", "current_weights": "yolov8n.pt",
            "phase": "canary", "reason": None, "started_at": iso(start), "phase_started_at": history[6]["at"],
            "ended_at": None, "cameras": ["gate-cam", "lot-cam"],
            "settings": {"window_s": 600, "min_frames": 200, "agreement_floor": 0.95, "max_error_ratio": 1.5,
                         "max_latency_ratio": 1.5, "map_floor": None},
            "compared": 140, "agreement": 0.971, "errors": {"candidate": 0, "current": 1},
            "latency_ms": {"candidate_p50": 41.2, "current_p50": 38.0}, "history": history}


def rolled_back(rollout: dict) -> dict:
    out = copy.deepcopy(rollout)
    end = dt.datetime.fromisoformat(out["history"][-1]["at"].replace("Z", "+00:00")) + dt.timedelta(minutes=1)
    out["history"].append({"at": iso(end), "phase": "canary", "agreement": 0.912, "compared": 240})
    out["history"].append({"at": iso(end), "phase": "rolled_back", "agreement": 0.912, "compared": 240})
    out.update(phase="rolled_back", ended_at=iso(end), phase_started_at=iso(end), agreement=0.912, compared=240,
               reason="agreement 0.912 below the floor 0.950 over 240 compared frames")
    return out


# a rollout the server refuses: a ServiceError body (docs/api.md), shown under the form
REFUSED = {"weights": "other-classes.pt",
           "body": {"error": "rollout_refused", "message": "'other-classes.pt' has other classes than campus: "
                                                           "it must score on CAMPUSGUARD_GATE_DATASET first"}}


class RolloutRoutes:
    """GET /models with a `rollout` per model (the server's reply plus ``self.rollouts``, and any
    other field of ``patches``), and the rollout's admin routes answered here, each request
    recorded as (method, path, body)."""

    def __init__(self, page, rollouts: dict[str, dict | None], patches: dict[str, dict] | None = None) -> None:
        self.rollouts = rollouts
        self.patches = patches or {}
        self.sent: list[tuple[str, str, dict | None]] = []
        page.route(MODELS, self.models)
        page.route(re.compile(r"/admin/models/[^/]+/rollout(/promote)?$"), self.admin)

    def models(self, route) -> None:
        if route.request.method != "GET":
            route.fallback()
            return
        try:
            body = route.fetch().json()
        except PlaywrightError:  # the test ended and closed its page while a refresh was under way
            return
        for model in body["models"]:
            model["rollout"] = self.rollouts.get(model["name"])
            model.update(self.patches.get(model["name"], {}))
        route.fulfill(status=200, content_type="application/json", body=json.dumps(body))

    def admin(self, route) -> None:
        request = route.request
        path = re.sub(r"^https?://[^/]+", "", request.url)
        self.sent.append((request.method, path, request.post_data_json if request.post_data else None))
        name = path.split("/")[3]
        if request.method == "POST" and (request.post_data_json or {}).get("weights") == REFUSED["weights"]:
            route.fulfill(status=409, content_type="application/json", body=json.dumps(REFUSED["body"]))
            return
        answer = copy.deepcopy(self.rollouts.get(name) or canary_rollout())
        if path.endswith("/promote"):
            answer.update(phase="promoted")
        elif request.method == "DELETE":
            answer.update(phase="rolled_back")
        else:
            answer.update(phase="shadow", model=name, candidate_weights=request.post_data_json["weights"],
                          current_weights=f"{name}.pt")
        route.fulfill(status=202 if request.method == "POST" and not path.endswith("/promote") else 200,
                      content_type="application/json", body=json.dumps(answer))


def test_the_rollout_panel_shows_the_phase_figures_and_agreement_chart(server, api, open_page):
    ensure_campus(api)
    page = open_page(server.url, KEYS["admin"], SHOT)
    routes = RolloutRoutes(page, {"yolov8n": canary_rollout(), "campus": None})
    goto_models(page)
    yolo = card(page, "yolov8n")
    panel = yolo.locator("section.rollout")
    panel.wait_for()
    assert yolo.locator(".model-head .phase-canary").inner_text() == "rollout: canary"
    steps = panel.locator("ol.steps li")
    assert steps.all_inner_texts() == ["Shadow", "Canary", "Promoted or rolled back"]
    assert [steps.nth(i).get_attribute("class").split()[1] for i in range(3)] == ["done", "current", "pending"]
    assert steps.nth(1).get_attribute("aria-current") == "step"
    assert fact(panel, "Weights") == "yolov8n-v2.pt replacing yolov8n.pt"
    assert fact(panel, "Frames compared").startswith("140 of 200 needed")
    assert panel.locator("progress").evaluate("p => [p.value, p.max]") == [140, 200]
    assert fact(panel, "Agreement") == "97.1 % (floor 95.0 %)"
    assert fact(panel, "Errors") == "candidate 0 · current 1 (bound ×1.5)"
    assert fact(panel, "Latency p50") == "candidate 41 ms · current 38 ms (×1.08, bound ×1.5)"
    assert fact(panel, "Canary cameras") == "gate-cam, lot-cam"
    assert fact(panel, "Window").startswith("10 min, this phase since")
    assert panel.locator(".reason").count() == 0 and panel.locator(".refused").count() == 0
    chart = panel.locator("svg.rollout-chart")
    assert chart.locator("circle.dot").count() == 11
    assert len(chart.locator("polyline.line").get_attribute("points").split()) == 11
    assert chart.locator("text.floor-label").text_content() == "floor 95.0 %"
    floor_y = float(chart.locator("line.floor").get_attribute("y1"))
    dots_y = [float(y) for y in chart.locator("circle.dot").evaluate_all("cs => cs.map(c => c.getAttribute('cy'))")]
    assert all(y < floor_y for y in dots_y)  # every point above the floor (SVG y grows downwards)
    assert chart.locator("line.phase-rule").count() == 1  # shadow -> canary
    assert chart.get_attribute("aria-label") == "Agreement over time: latest 97.1 %, floor 95.0 %"
    # promote and abort for the canary; a model without a rollout offers to start one
    assert yolo.locator("details.rollout-start-box").is_hidden()
    campus = card(page, "campus")
    assert campus.locator("section.rollout").count() == 0 and campus.locator("button.promote").is_hidden()
    assert campus.locator("button.abort").is_hidden()
    no_horizontal_overflow(page)
    screenshot(page, "models")

    yolo.get_by_role("button", name="Promote").click()
    yolo.locator(".action-result.ok").wait_for()
    assert yolo.locator(".action-result").inner_text() == "Promoted: yolov8n serves yolov8n-v2.pt."
    yolo.locator("button.abort").click()
    assert yolo.locator("button.abort").inner_text() == "Really roll back?"
    yolo.locator("button.abort").click()
    page.wait_for_function("() => document.querySelector(\"article.model[data-model='yolov8n'] .action-result\")"
                           ".textContent === 'Rolled back: yolov8n serves yolov8n.pt.'")
    start = campus.locator("details.rollout-start-box")
    start.locator("summary").click()
    start.get_by_label("Candidate weights file").fill(REFUSED["weights"])
    start.get_by_role("button", name="Start rollout").click()
    start.locator(".result.error").wait_for()  # under the form, which stays open with what was typed
    assert start.locator(".result").inner_text() == f"Refused: {REFUSED['body']['message']} (409 rollout_refused)"
    start.get_by_label("Candidate weights file").fill("campus-v2.pt")
    start.get_by_label("Window (s)").fill("300")
    start.get_by_label("Minimum frames").fill("50")
    start.get_by_label("Agreement floor (0 to 1)").fill("0.97")
    start.get_by_role("button", name="Start rollout").click()
    campus.locator(".action-result.ok").wait_for()  # the form folds away: the outcome is on the card
    assert campus.locator(".action-result").inner_text() == (
        "Rollout started: campus-v2.pt runs as the shadow of campus.pt.")
    assert start.get_attribute("open") is None
    assert routes.sent == [("POST", "/admin/models/yolov8n/rollout/promote", None),
                           ("DELETE", "/admin/models/yolov8n/rollout", None),
                           ("POST", "/admin/models/campus/rollout", {"weights": REFUSED["weights"]}),
                           ("POST", "/admin/models/campus/rollout",
                            {"weights": "campus-v2.pt", "window_s": 300, "min_frames": 50, "agreement_floor": 0.97})]


def test_a_rolled_back_rollout_says_why_and_a_viewer_gets_no_buttons(server, api, open_page):
    ensure_campus(api)
    page = open_page(server.url, KEYS["viewer"], SHOT)
    RolloutRoutes(page, {"yolov8n": rolled_back(canary_rollout())})
    goto_models(page)
    panel = card(page, "yolov8n").locator("section.rollout")
    panel.wait_for()
    assert panel.locator("h3").inner_text() == "Rollout rolled back"
    reason = panel.locator(".reason").inner_text()
    assert reason == "Why: agreement 0.912 below the floor 0.950 over 240 compared frames"
    steps = panel.locator("ol.steps li")
    assert steps.all_inner_texts() == ["Shadow", "Canary", "Rolled back"]
    assert steps.nth(2).get_attribute("aria-current") == "step"
    assert fact(panel, "Agreement") == "91.2 % (floor 95.0 %)" and panel.locator("dd .refused").count() == 1
    assert panel.locator("svg circle.dot.below").count() == 2
    for admin_only in (".model-actions", "button.promote", "button.abort", "details.rollout-start-box", "#model-load"):
        assert page.locator(admin_only).count() == 0, admin_only
    screenshot(page, "models-rollout-rolled-back")


def test_a_model_loading_and_one_draining_say_so(server, api, open_page):
    """GET /models while campus loads (a load: its change says nothing more than its state) and
    yolov8n serves new weights while its old ones drain (a swap): the states and changes in
    words, the loading model's runtime not known yet."""
    ensure_campus(api)
    page = open_page(server.url, KEYS["viewer"])
    loading = {"state": "loading", "change": "loading", "backend": None, "provider": None, "precision": None,
               "device": None, "shapes": None, "queue_depth": None, "images_per_s": None, "memory": None}
    RolloutRoutes(page, {}, {"campus": loading, "yolov8n": {"change": "draining"}})
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
    ensure_campus(api)
    page = open_page(server.url, KEYS["admin"], viewport)
    RolloutRoutes(page, {"yolov8n": canary_rollout()})
    goto_models(page)
    card(page, "yolov8n").locator("svg.rollout-chart").wait_for()
    card(page, "yolov8n").locator("details.classes summary").click()
    no_horizontal_overflow(page)
