"""A rollout on the console's Models page (issue 41 part 4), for real: a real Chromium against a
real `campusguard serve` (ONNX Runtime at 320 px) serving the ONNX export of the shared yolov8n
for the two cameras of a site file, with two candidates in its models folder: the same model
exported again (it agrees) and a drifted copy (class scores halved: it does not). Frames are
real coco-val128 JPEGs posted by the test as those cameras, on a thread of its own, while the
page is watched.

1. An admin starts a rollout from the page's form (a refusal first, shown under it); the page
   follows it from shadow to canary, its figures those of GET /admin/models/{name}/rollout, with
   the agreement chart (the start's "runs as the shadow" line goes once it is in its canary);
   Promote makes the name serve the candidate (screenshot models.png).
2. An admin aborts a rollout: rolled back, and why.
3. The drifted candidate is rolled back by the server within its window; a viewer sees why, the
   chart's points below the floor, and no button (screenshot models-rollout-rolled-back.png).

The bounds are small (a window of seconds, a few frames) and the latency bound large: two engines
on two shared, noisy cores (docs/models.md); these tests are about what the page shows.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal

import httpx
import pytest

from tests.browser.conftest import (
    PHONE,
    card,
    client,
    console_server,
    fact,
    goto_models,
    no_horizontal_overflow,
    screenshot,
)
from tests.support.models import onnx_candidates, renamed_onnx
from tests.support.rollout import TWO_CAMERAS_SITE, FramePoster, frames_of, labelled_set

pytest.importorskip("playwright.sync_api", reason="pip install playwright (the dev extra)")
pytestmark = [pytest.mark.browser, pytest.mark.timeout(300)]
KEYS = {"viewer": "rollout-view-key-1", "admin": "rollout-admin-key-1", "camera": "rollout-camera-key-1"}
SHOT = {"width": 1280, "height": 1000}  # the screenshots' window: a model card with its rollout chart whole
MODEL = "yolov8n"
WINDOW_S, MIN_FRAMES = 20, 12  # the promoted rollout's: the canary waits (too few frames) for Promote


@pytest.fixture(scope="module")
def server(tmp_path_factory, weights, dataset):
    tmp = tmp_path_factory.mktemp("console-rollout")
    folder = tmp / "models"
    folder.mkdir()
    exports = onnx_candidates(weights, folder, MODEL)
    renamed_onnx(exports["served"], folder / f"{MODEL}-vehicle.onnx", {2: "vehicle"})  # other classes
    site = tmp / "site.yaml"
    site.write_text(TWO_CAMERAS_SITE)
    srv = console_server(tmp, exports["served"], site, KEYS, backend="onnx",
                         gate_dataset=labelled_set(dataset, tmp / "labelled", images=8))
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def api(server):
    with client(server, KEYS["admin"], timeout=120) as http:  # a rollout's start answers once its candidate loaded
        yield http


@pytest.fixture
def poster(server, dataset):
    # a few frames a second: the comparator keeps up (nothing of the shadow's still queued when the
    # canary starts), and the chart gets a point a second before a window has its frames
    frames = FramePoster(server.url, KEYS["camera"], frames_of(dataset, 24), ["cam-1", "cam-2"], every_s=0.3)
    yield frames
    frames.stop()


def rollout(api: httpx.Client) -> dict:
    r = api.get(f"/admin/models/{MODEL}/rollout")
    assert r.status_code == 200, r.text
    return r.json()


def listed(api: httpx.Client) -> dict:
    return next(m for m in api.get("/models").json()["models"] if m["name"] == MODEL)


def no_change(api: httpx.Client) -> None:
    """Until the last candidate has drained (a rollout's start is refused 409 model_busy meanwhile)."""
    deadline = time.monotonic() + 90
    while listed(api)["change"] is not None:
        assert time.monotonic() < deadline, listed(api)
        time.sleep(0.3)


def until(api: httpx.Client, done: Callable[[dict], bool], limit_s: float = 150) -> dict:
    """GET /admin/models/{name}/rollout until ``done`` holds for it; that rollout."""
    deadline = time.monotonic() + limit_s
    while not done(now := rollout(api)):
        assert time.monotonic() < deadline, f"the rollout did not move on in {limit_s} s: {now}"
        time.sleep(0.2)
    return now


def until_phase_leaves(api: httpx.Client, phase: str) -> dict:
    return until(api, lambda r: r["phase"] != phase)


def fixed(v: float, digits: int) -> str:
    """``v`` as the page writes it (JavaScript's ``toFixed``, ``Math.round``): a tie rounds up
    (Python's format rounds it to even: 16.5 ms is "17 ms" on the page, "16" in an f-string)."""
    return str(Decimal(v).quantize(Decimal(1).scaleb(-digits), ROUND_HALF_UP))


def pct(v: float) -> str:
    return f"{fixed(v * 100, 1)} %"


def start_box(page):
    box = card(page, MODEL).locator("details.rollout-start-box")
    if box.get_attribute("open") is None:
        box.locator("summary").click()
    return box


def start_on_page(page, weights: str, **fields: object) -> str:
    """Fill the card's "Start a rollout…" form (fields by label) and submit it; the card's result."""
    box = start_box(page)
    box.get_by_label("Candidate weights file").fill(weights)
    for label, value in fields.items():
        box.get_by_label(label).fill(str(value))
    box.get_by_role("button", name="Start rollout").click()
    result = card(page, MODEL).locator(".action-result.ok")
    result.wait_for(timeout=120_000)  # the candidate loads (low priority) before the 202
    return result.inner_text()


def same_figures(page, api: httpx.Client, limit_s: float = 20) -> dict:
    """The panel's figures once they are those of GET /admin/models/{name}/rollout (the page
    refreshes every 3 s; the frames have stopped, so the window's figures hold still); that rollout."""
    panel = card(page, MODEL).locator("section.rollout")
    deadline = time.monotonic() + limit_s
    while True:
        r = rollout(api)
        st, lat = r["settings"], r["latency_ms"]
        want = {"Frames compared": f"{r['compared']} of {st['min_frames']} needed",
                "Agreement": f"{pct(r['agreement'])} (floor {pct(st['agreement_floor'])})" if r["agreement"] is not None
                else f"n/a (floor {pct(st['agreement_floor'])})",
                "Errors": f"candidate {r['errors']['candidate']} · current {r['errors']['current']} "
                          f"(bound +{st['max_error_ratio']:g} per frame)",
                "Canary cameras": ", ".join(r["cameras"])}
        if lat["candidate_p50"] and lat["current_p50"]:
            ratio = lat["candidate_p50"] / lat["current_p50"]
            want["Latency p50"] = (f"candidate {fixed(lat['candidate_p50'], 0)} ms · current "
                                   f"{fixed(lat['current_p50'], 0)} ms (×{fixed(ratio, 2)}, "
                                   f"bound ×{st['max_latency_ratio']:g})")
        shown = {k: fact(panel, k).strip() for k in want}
        if shown == want:
            return r
        assert time.monotonic() < deadline, f"the page shows {shown}, GET /admin/models/{MODEL}/rollout {want}"
        time.sleep(0.5)


def step_states(panel) -> list[tuple[str, str]]:
    return panel.locator("ol.steps li").evaluate_all("ls => ls.map(l => [l.textContent, l.className.split(' ')[1]])")


@pytest.mark.slow  # the shadow lasts its window (20 s) before the canary
def test_a_rollout_started_on_the_page_goes_from_shadow_to_canary_and_is_promoted(server, api, poster, open_page):
    page = open_page(server.url, KEYS["admin"], SHOT)
    goto_models(page)
    yolo = card(page, MODEL)
    assert yolo.locator("section.rollout").count() == 0 and yolo.locator("button.promote").is_hidden()
    box = start_box(page)  # refused: weights outside the models folder
    box.get_by_label("Candidate weights file").fill("../site.yaml")
    box.get_by_role("button", name="Start rollout").click()
    box.locator(".result.error").wait_for()
    refused = box.locator(".result").inner_text()
    assert refused.startswith("Refused: weights '../site.yaml': must be inside the models folder")
    assert refused.endswith("(422 invalid_weights)") and box.get_attribute("open") is not None  # kept as typed
    assert box.get_by_label("Candidate weights file").input_value() == "../site.yaml"
    assert listed(api)["rollout"] is None  # a refusal changes nothing

    started = start_on_page(page, f"{MODEL}-reexported.onnx", **{
        "Canary cameras (comma separated)": "cam-2", "Window (s)": WINDOW_S, "Minimum frames": MIN_FRAMES,
        "Latency bound (× the current's p50)": 50})
    assert started == f"Rollout started: {MODEL}-reexported.onnx runs as the shadow of {MODEL}.onnx."
    yolo.locator("details.rollout-start-box").wait_for(state="hidden")  # on the next refresh: one rollout at a time
    r = rollout(api)
    assert r["phase"] == "shadow" and r["cameras"] == ["cam-2"] and r["comparable"] is True
    assert r["settings"] == {"window_s": WINDOW_S, "min_frames": MIN_FRAMES, "agreement_floor": 0.95,
                             "max_error_ratio": 0.01, "max_latency_ratio": 50, "map_floor": None}
    panel = yolo.locator("section.rollout")
    panel.wait_for()
    assert yolo.locator(".model-head .phase-shadow").inner_text() == "rollout: shadow"
    assert step_states(panel) == [["Shadow", "current"], ["Canary", "pending"], ["Promoted or rolled back", "pending"]]
    assert fact(panel, "Weights") == f"{MODEL}-reexported.onnx replacing {MODEL}.onnx"
    assert yolo.locator(".action-result").inner_text() == started  # the shadow it speaks of is running

    poster.start()  # live frames as both cameras: the shadow compares them, then holds for its window
    canary = until_phase_leaves(api, "shadow")
    poster.stop()
    assert canary["phase"] == "canary", canary
    assert canary["reason"] is None and canary["history"][-1]["agreement"] == 1.0  # the shadow held
    poster.start(limit=3, cameras=["cam-2"])  # a few frames on the canary camera: fewer than it needs to pass
    poster.wait()
    until(api, lambda r: r["history"][-1]["phase"] == "canary" and r["compared"] > 0)  # judged once in the canary
    yolo.locator(".model-head .phase-canary").wait_for()
    assert step_states(panel) == [["Shadow", "done"], ["Canary", "current"], ["Promoted or rolled back", "pending"]]
    # "runs as the shadow of" is out of date in the canary: the line goes (the panel says where it is)
    assert yolo.locator(".action-result").inner_text() == ""
    r = same_figures(page, api)
    assert r["phase"] == "canary" and 0 < r["compared"] < MIN_FRAMES
    assert panel.locator(".reason").count() == 0  # nothing ended: no reason
    chart = panel.locator("svg.rollout-chart")
    assert chart.locator("circle.dot.phase-shadow").count() >= 1
    assert chart.locator("circle.dot.phase-canary").count() >= 1
    assert chart.locator("circle.dot.below").count() == 0
    assert chart.locator("line.phase-rule").count() == 1  # shadow -> canary
    assert chart.locator("text.floor-label").text_content() == "floor 95.0 %"
    assert chart.get_attribute("aria-label").startswith("Agreement over time: latest 100.0 %")
    screenshot(page, "models")
    phone = open_page(server.url, KEYS["viewer"], PHONE)
    goto_models(phone)
    card(phone, MODEL).locator("svg.rollout-chart").wait_for()
    no_horizontal_overflow(phone)

    yolo.get_by_role("button", name="Promote").click()
    yolo.locator(".action-result.ok").wait_for()
    assert yolo.locator(".action-result").inner_text() == f"Promoted: {MODEL} serves {MODEL}-reexported.onnx."
    done = rollout(api)
    assert done["phase"] == "promoted" and done["reason"].startswith("promoted by hand by ")
    assert listed(api)["weights"] == f"{MODEL}-reexported.onnx"
    panel.locator("h3:text-is('Rollout promoted')").wait_for()
    assert panel.locator(".reason").inner_text() == f"Why: {done['reason']}"
    page.wait_for_function("(w) => document.querySelector(\"article.model[data-model='yolov8n'] .model-facts "
                           ".mono\").textContent === w", arg=f"{MODEL}-reexported.onnx")
    assert yolo.locator("button.promote").is_hidden() and yolo.locator("button.abort").is_hidden()
    assert yolo.locator("details.rollout-start-box").is_visible()  # ended: another may start


def test_an_aborted_rollout_is_rolled_back_and_says_so(server, api, poster, open_page):
    no_change(api)
    page = open_page(server.url, KEYS["admin"])
    goto_models(page)
    yolo = card(page, MODEL)
    serving = listed(api)["weights"]
    started = start_on_page(page, f"{MODEL}.onnx", **{"Window (s)": 600, "Minimum frames": 1000})
    assert started == f"Rollout started: {MODEL}.onnx runs as the shadow of {serving}."
    poster.start(limit=4)
    poster.wait()
    yolo.locator(".model-head .phase-shadow").wait_for()
    abort = yolo.locator("button.abort")
    abort.click()
    assert abort.inner_text() == "Really roll back?"
    abort.click()
    result = yolo.locator(".action-result")
    page.wait_for_function("(t) => document.querySelector(\"article.model[data-model='yolov8n'] .action-result\")"
                           ".textContent === t", arg=f"Rolled back: {MODEL} serves {serving}.")
    assert "ok" in result.get_attribute("class")
    r = rollout(api)
    assert r["phase"] == "rolled_back" and r["reason"].startswith("aborted by hand by ") and r["reason"].endswith(
        " in shadow")
    assert listed(api)["weights"] == serving
    panel = yolo.locator("section.rollout")
    panel.locator("h3:text-is('Rollout rolled back')").wait_for()
    assert panel.locator(".reason").inner_text() == f"Why: {r['reason']}"
    assert step_states(panel) == [["Shadow", "done"], ["Canary (skipped)", "skipped"], ["Rolled back", "current"]]
    actions = [a["action"] for a in api.get("/audit", params={"limit": 20}).json()["items"]]
    assert {"model.rollout.start", "model.rollout.promote", "model.rollout.abort"} <= set(actions)


def test_a_drifted_candidate_is_rolled_back_by_the_server_and_a_viewer_sees_why(server, api, poster, open_page):
    no_change(api)
    r = api.post(f"/admin/models/{MODEL}/rollout", json={"weights": f"{MODEL}-drifted.onnx", "window_s": 60,
                                                          "min_frames": 24, "max_latency_ratio": 50})
    assert r.status_code == 202, r.text
    page = open_page(server.url, KEYS["viewer"], SHOT)
    goto_models(page)
    poster.start()
    ended = until_phase_leaves(api, "shadow")
    poster.stop()
    assert ended["phase"] == "rolled_back" and ended["reason"].startswith("shadow: agreement"), ended
    panel = card(page, MODEL).locator("section.rollout")
    panel.locator("h3:text-is('Rollout rolled back')").wait_for()
    assert panel.locator(".reason").inner_text() == f"Why: {ended['reason']}"
    assert step_states(panel) == [["Shadow", "done"], ["Canary (skipped)", "skipped"], ["Rolled back", "current"]]
    same_figures(page, api)
    assert panel.locator("dd .refused").count() >= 1  # the agreement below its floor, marked
    chart = panel.locator("svg.rollout-chart")
    assert chart.locator("circle.dot.below").count() >= 1
    floor_y = float(chart.locator("line.floor").get_attribute("y1"))
    below = chart.locator("circle.dot.below").evaluate_all("cs => cs.map(c => +c.getAttribute('cy'))")
    assert all(y > floor_y for y in below)  # drawn under the floor's line (SVG y grows downwards)
    for admin_only in (".model-actions", "button.promote", "button.abort", "details.rollout-start-box", "#model-load"):
        assert page.locator(admin_only).count() == 0, admin_only
    screenshot(page, "models-rollout-rolled-back")


def test_a_candidate_with_other_classes_shows_its_map_check_and_goes_straight_to_its_canary(server, api, open_page):
    """``car`` renamed ``vehicle``: no agreement to compare; judged on the labelled set
    (CAMPUSGUARD_GATE_DATASET) before it starts, then on errors and latency in its canary."""
    no_change(api)
    page = open_page(server.url, KEYS["admin"])
    goto_models(page)
    yolo = card(page, MODEL)
    started = start_on_page(page, f"{MODEL}-vehicle.onnx", **{"Canary cameras (comma separated)": "cam-1",
                                                               "Window (s)": 600, "Minimum frames": 1000})
    assert started == (f"Rollout started: {MODEL}-vehicle.onnx serves cam-1 as a canary (other classes: its mAP "
                       "held; judged on errors and latency).")
    r = rollout(api)
    assert r["phase"] == "canary" and r["comparable"] is False and r["map"]["shared_classes"] == 79
    panel = yolo.locator("section.rollout")
    yolo.locator(".model-head .phase-canary").wait_for()
    assert step_states(panel) == [["Shadow (skipped)", "skipped"], ["Canary", "current"],
                                  ["Promoted or rolled back", "pending"]]
    assert yolo.locator(".action-result").inner_text() == started  # it started in the canary it speaks of
    m = r["map"]
    assert fact(panel, "mAP check") == (f"candidate {fixed(m['candidate_map'], 3)} · current "
                                        f"{fixed(m['current_map'], 3)} (floor {fixed(m['floor'], 3)}) on 79 shared "
                                        f"classes, {m['images']} images")
    assert fact(panel, "Agreement") == "not compared: other classes (judged by mAP, then errors and latency)"
    chart = panel.locator("svg.rollout-chart")
    assert chart.locator("circle.dot").count() == 0
    assert "Other classes: no agreement to draw" in chart.text_content()
    r = api.delete(f"/admin/models/{MODEL}/rollout")  # the abort by the page: above
    assert r.status_code == 200 and r.json()["phase"] == "rolled_back", r.text
