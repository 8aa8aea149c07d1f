"""deploy/grafana: the dashboard JSON and its provisioning.

The panels the issue lists exist and query what they claim (requests/s, latency
p50/p95/p99 overall and per stage, batch size, queue depth, VRAM per GPU, detections by class
and camera, errors by code), all through the provisioned datasource. That every metric name
is really exported is checked against a live server in test_live_observability.py.
"""

from __future__ import annotations

import json

import pytest

from tests.deploy.conftest import DASHBOARD, GRAFANA_DIR, dashboard_queries, load_yaml, metric_names


@pytest.fixture(scope="module")
def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(dashboard) -> list[dict]:
    out = []
    for panel in dashboard["panels"]:
        out.append(panel)
        out += panel.get("panels", [])
    return out


def panel(dashboard, title: str) -> dict:
    matches = [p for p in panels(dashboard) if p["title"] == title]
    assert len(matches) == 1, f"panel {title!r}: {len(matches)} found"
    return matches[0]


def exprs(p: dict) -> list[str]:
    return [t["expr"] for t in p["targets"]]


def test_provisioning_files():
    ds = load_yaml(GRAFANA_DIR / "provisioning/datasources/prometheus.yml")
    assert ds["apiVersion"] == 1
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus" and source["uid"] and source["isDefault"]
    dash = load_yaml(GRAFANA_DIR / "provisioning/dashboards/campusguard.yml")
    assert dash["apiVersion"] == 1
    assert dash["providers"][0]["type"] == "file"


def test_every_query_uses_the_provisioned_datasource(dashboard):
    uid = load_yaml(GRAFANA_DIR / "provisioning/datasources/prometheus.yml")["datasources"][0]["uid"]
    for p in panels(dashboard):
        if p["type"] == "row":
            continue
        assert p["datasource"]["uid"] == uid, p["title"]
        assert p["targets"], p["title"]
        for target in p["targets"]:
            assert target["datasource"]["uid"] == uid and target["expr"].strip(), p["title"]
    for var in dashboard["templating"]["list"]:
        assert var["datasource"]["uid"] == uid


def test_dashboard_identity_and_layout(dashboard):
    assert dashboard["uid"] == "campusguard-detector" and dashboard["title"]
    ids = [p["id"] for p in panels(dashboard)]
    assert len(ids) == len(set(ids))
    cells = set()
    for p in panels(dashboard):
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"panel {p['title']!r} overlaps another"
                cells.add((x, y))


def test_required_panels(dashboard):
    req = panel(dashboard, "Requests/s by route and status")
    assert "rate(campusguard_requests_total" in exprs(req)[0] and "by (route, status)" in exprs(req)[0]
    for title, metric, by in (("Request latency p50 / p95 / p99", "campusguard_request_duration_seconds_bucket", "route"),
                              ("Stage latency p50 / p95 / p99", "campusguard_stage_duration_seconds_bucket", "stage")):
        p = panel(dashboard, title)
        quantiles = sorted(e.split("histogram_quantile(")[1].split(",")[0] for e in exprs(p))
        assert quantiles == ["0.5", "0.95", "0.99"], title
        assert all(metric in e and f"by ({by}, le)" in e for e in exprs(p)), title
    batch = " ".join(exprs(panel(dashboard, "Batch size (images per inference)")))
    assert "campusguard_batch_size_sum" in batch and "campusguard_batch_size_bucket" in batch
    assert "campusguard_queue_depth" in exprs(panel(dashboard, "Queue depth"))[0]
    vram = panel(dashboard, "VRAM per GPU")
    assert {n for e in exprs(vram) for n in metric_names(e)} == {
        "campusguard_device_memory_used_bytes", "campusguard_device_memory_reserved_bytes",
        "campusguard_device_memory_total_bytes"}
    assert all("{{device}}" in t["legendFormat"] and "{{replica}}" in t["legendFormat"] for t in vram["targets"])
    assert "by (class_name)" in exprs(panel(dashboard, "Detections/s by class"))[0]
    assert "by (camera_id)" in exprs(panel(dashboard, "Detections/s by camera"))[0]
    errors = exprs(panel(dashboard, "Inference errors by code"))[0]
    assert "campusguard_inference_errors_total" in errors and "by (model, code)" in errors
    assert 'status=~"4..|5.."' in exprs(panel(dashboard, "HTTP errors by status"))[0]
    crossings = " ".join(exprs(panel(dashboard, "Line crossings per hour by camera / line / direction")))  # issue #12: the dashboard shows crossings
    assert "campusguard_line_crossings_total" in crossings and "direction" in crossings.split("by (")[1]


def test_replica_variable_filters_every_campusguard_query(dashboard):
    var, _ = dashboard["templating"]["list"]
    assert var["name"] == "replica" and var["includeAll"] and var["multi"]
    for q in dashboard_queries(dashboard):
        if q.where.startswith("dashboard panel"):
            assert 'replica=~"$replica"' in q.expr, q.where


PER_MODEL = ("campusguard_stage_duration_seconds", "campusguard_batch_size", "campusguard_queue_", "campusguard_images",
             "campusguard_inferences", "campusguard_inference_errors", "campusguard_model_ready", "campusguard_shadow_",
             "campusguard_rollout_")


def test_model_variable_filters_every_per_model_query(dashboard):
    """Issue 41 part 5: the engine's and the shadow lane's series carry ``model``; each panel over
    them follows the Model variable and keeps the models apart (or sums them on purpose)."""
    _, var = dashboard["templating"]["list"]
    assert var["name"] == "model" and var["includeAll"] and "campusguard_model_ready, model" in var["definition"]
    per_model = [q for q in dashboard_queries(dashboard)
                 if q.where.startswith("dashboard panel") and any(n in q.expr for n in PER_MODEL)]
    assert len(per_model) >= 12
    for q in per_model:
        assert 'model=~"$model"' in q.expr, q.where
    shown = " ".join(exprs(panel(dashboard, "Inference latency p95 by model")))
    assert "by (model, le)" in shown and 'stage="inference"' in shown


def test_camera_stream_panels(dashboard):
    """Issue #24: a dead source is visible (the state per camera, what CampusGuardCameraStreamDown watches)."""
    state = panel(dashboard, "Camera stream state")
    assert state["type"] == "state-timeline"
    assert exprs(state) == ['max by (camera_id) (campusguard_source_state{state="streaming",replica=~"$replica"})']
    flow = " ".join(exprs(panel(dashboard, "Stream frames/s read, sent, dropped by camera")))
    for name in ("campusguard_source_frames_read_total", "campusguard_source_frames_sent_total",
                 "campusguard_source_frames_dropped_total"):
        assert name in flow
    assert "by (camera_id, reason)" in flow
    assert "campusguard_source_reconnects_total" in exprs(panel(dashboard, "Stream reconnects per hour by camera"))[0]


def test_shadow_panels_show_agreement_against_the_replicas_alert_floor(dashboard):
    """Issue #27: what CampusGuardShadowDisagreement watches, per camera, next to the floor it fires below."""
    shown = " ".join(exprs(panel(dashboard, "Shadow agreement by camera, with the alert floor")))
    assert "campusguard_shadow_agreement" in shown and "by (model, camera_id)" in shown
    assert "campusguard_shadow_alert_below" in shown
    flow = " ".join(exprs(panel(dashboard, "Shadow frames compared and dropped per minute")))
    assert "campusguard_shadow_compared_total" in flow and "campusguard_shadow_dropped_total" in flow and "by (reason)" in flow


def test_rollout_row_shows_phase_agreement_against_its_floor_frames_and_outcomes(dashboard):
    """Issue 41 part 4: a rollout is followed on the dashboard from the series the controller exports
    (app/flow/series.py): the phase of each model's latest rollout per replica, its agreement against
    the floor it is rolled back below, the frames compared by phase, and how rollouts ended."""
    rows = [p["title"] for p in dashboard["panels"] if p["type"] == "row"]
    assert "Rollouts (a candidate behind the shadow reference)" in rows
    phase = panel(dashboard, "Rollout phase by model")
    assert phase["type"] == "state-timeline"
    (expr,) = exprs(phase)
    assert metric_names(expr) == {"campusguard_rollout_phase"} and "by (model, replica)" in expr
    # one number per phase, each named by the value mapping (a replica is in one phase at a time)
    codes = {int(e.split(" * ")[0]): e.split('phase="')[1].split('"')[0] for e in expr.split(" + ")}
    assert codes == {1: "shadow", 2: "canary", 3: "promoted", 4: "rolled_back"}
    (mapping,) = phase["fieldConfig"]["defaults"]["mappings"]
    texts = {int(k): v["text"] for k, v in mapping["options"].items()}
    assert texts == {0: "none", 1: "shadow", 2: "canary", 3: "promoted", 4: "rolled back"}
    agreement = panel(dashboard, "Rollout agreement by model, with its floor")
    assert [metric_names(e) for e in exprs(agreement)] == [{"campusguard_rollout_agreement"},
                                                            {"campusguard_rollout_agreement_floor"}]
    assert all("by (model)" in e for e in exprs(agreement))
    (compared,) = exprs(panel(dashboard, "Rollout frames compared per minute by model / phase"))
    assert "rate(campusguard_rollout_compared_total" in compared and "by (model, phase)" in compared
    (ended,) = exprs(panel(dashboard, "Rollouts ended per hour by model / outcome"))
    assert "increase(campusguard_rollout_total" in ended and "by (model, outcome)" in ended
