"""Observability against a real running service (the `live_server` fixture).

1. Every metric name the Grafana dashboard, the alert rules and the Kubernetes autoscaler
   query is present in the service's /metrics output, parsed with prometheus_client's
   parser, and the labels they match on exist on those series.
2. A real Prometheus server (Debian's binary) runs the shipped deploy/prometheus config,
   retargeted at the service on loopback; after detections it returns the latency histogram
   through its HTTP query API, every alert rule evaluates cleanly, and the dashboard's
   queries return data.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import math
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from app.core.metrics import LATENCY_BUCKETS
from app.inference.series import STAGES
from tests.support.net import free_port
from tests.deploy.conftest import (

    PROMETHEUS_CONFIG, PROMETHEUS_SYNTHETIC, TARGET_LABELS, alert_queries, alert_rules,
    dashboard_queries, grafana_to_promql, hpa_queries, load_yaml, metric_names, require_tool, selector_labels, tool,
)
from tests.support.wait import wait_for

pytestmark = pytest.mark.server  # module-scoped real servers (markers: tests/conftest.py)

CAMERA = "gate-north"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def live_server(tmp_path_factory, weights):
    """The service with the example site file, so the rule/event series exist too."""
    from tests.conftest import start_server

    tmp = tmp_path_factory.mktemp("observability")
    server = start_server(tmp, weights, site_config=REPO / "deploy/site.example.yaml",
                          events_db_url=f"sqlite:///{tmp / 'events.db'}", snapshot_dir=tmp / "snapshots")
    yield server
    server.stop()


def detect(client: httpx.Client, image: bytes, camera: str | None = CAMERA) -> httpx.Response:
    params = {"camera_id": camera} if camera else {}
    return client.post("/detect", params=params, files={"image": ("bus.jpg", image, "image/jpeg")})


@pytest.fixture(scope="module")
def traffic(live_server, bus_jpg) -> dict[str, int]:
    """A few detections (with and without a camera) and a bad request."""
    with live_server.client() as client:
        for camera in (CAMERA, "gate-south", "plaza-cam", None):
            r = detect(client, bus_jpg, camera)
            assert r.status_code == 200, r.text
            assert r.json()["detections"], "bus.jpg has people and a bus"
        bad = client.post("/detect", content=b"this is not an image", headers={"content-type": "image/jpeg"})
        assert 400 <= bad.status_code < 500, bad.text
        # a gateway's report of the camera's stream: the campusguard_source_* series (dashboard, alert)
        now = dt.datetime.now(dt.timezone.utc).isoformat()
        report = {"gateway": "gateway-0", "reported_at": now, "ttl_s": 30, "source": {
            "source": "rtsp://10.0.0.5/stream2", "state": "streaming", "since": now, "reconnects": 1,
            "frames_read": 12, "frames_sent": 10, "dropped": {"superseded": 2}, "input_fps": 1.0, "last_frame_at": now}}
        r = client.put("/cameras/gate-cam/source", json=report)  # a camera of the site file
        assert r.status_code == 204, r.text
    return {"/detect": 5}


def scrape(server) -> str:
    r = httpx.get(f"{server.url}/metrics", timeout=10)
    assert r.status_code == 200
    return r.text


def exported(text: str) -> dict[str, set[str]]:
    """{sample name: label names} of every sample in the exposition."""
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


def test_every_queried_metric_is_exported(live_server, traffic):
    samples = exported(scrape(live_server))
    queries = dashboard_queries() + alert_queries() + hpa_queries()
    used: set[str] = set()
    problems = []
    for q in queries:
        for name in metric_names(q.expr):
            used.add(name)
            if name not in samples and name not in PROMETHEUS_SYNTHETIC:
                problems.append(f"{q.where}: {name} is not in /metrics")
        for name, labels in selector_labels(q.expr).items():
            if name in samples:
                unknown = labels - samples[name] - TARGET_LABELS
                if unknown:
                    problems.append(f"{q.where}: {name} has no label(s) {sorted(unknown)}")
    assert not problems, "\n".join(problems)
    # the check is not vacuous: the families the issue names are all used and all exported
    for name in ("campusguard_requests_total", "campusguard_request_duration_seconds_bucket",
                 "campusguard_stage_duration_seconds_bucket", "campusguard_batch_size_bucket",
                 "campusguard_queue_depth", "campusguard_device_memory_total_bytes",
                 "campusguard_device_memory_reserved_bytes", "campusguard_device_memory_used_bytes",
                 "campusguard_detections_total", "campusguard_camera_detections_total",
                 "campusguard_inference_errors_total", "campusguard_rejected_requests_total",
                 "campusguard_ready", "campusguard_cache_clears_total", "campusguard_source_state",
                 "campusguard_source_frames_dropped_total", "campusguard_source_reconnects_total"):
        assert name in used, f"{name} is not used by any dashboard panel or alert"
        assert name in samples, f"{name} has no sample in /metrics"
    assert used & PROMETHEUS_SYNTHETIC <= {"up"}


def test_exported_label_values_match_the_queries(live_server, traffic):
    families = {f.name: f for f in text_string_to_metric_families(scrape(live_server))}
    stages = {s.labels["stage"] for s in families["campusguard_stage_duration_seconds"].samples}
    assert stages == set(STAGES)
    routes = {s.labels["route"] for s in families["campusguard_requests"].samples}
    assert "/detect" in routes  # the detection routes the alert rules select by name
    cameras = {s.labels["camera_id"] for s in families["campusguard_camera_detections"].samples}
    assert {CAMERA, "gate-south"} <= cameras
    statuses = {s.labels["status"] for s in families["campusguard_requests"].samples if s.labels["route"] == "/detect"}
    assert "200" in statuses and any(s.startswith("4") for s in statuses)


# --- a real Prometheus ------------------------------------------------------------------------
@pytest.fixture(scope="module")
def prometheus(live_server, traffic, tmp_path_factory):
    binary = require_tool("prometheus", "apt-get install prometheus, or `make system-deps`")
    tmp = tmp_path_factory.mktemp("prometheus")
    port = free_port()
    target = live_server.url.removeprefix("http://")
    config = load_yaml(PROMETHEUS_CONFIG)
    config["global"].update(scrape_interval="1s", evaluation_interval="1s")
    config["rule_files"] = [str((PROMETHEUS_CONFIG.parent / f).resolve()) for f in config["rule_files"]]
    for job in config["scrape_configs"]:
        if job["job_name"] == "campusguard":
            job.update(scrape_interval="1s", scrape_timeout="1s", static_configs=[{"targets": [target]}])
        else:
            job["static_configs"] = [{"targets": [f"127.0.0.1:{port}"]}]
    path = tmp / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    promtool = tool("promtool")
    if promtool:
        check = subprocess.run([promtool, "check", "config", str(path)], capture_output=True, text=True)
        assert check.returncode == 0, check.stdout + check.stderr
    log = (tmp / "prometheus.log").open("wb")
    proc = subprocess.Popen([binary, f"--config.file={path}", f"--storage.tsdb.path={tmp / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            assert proc.poll() is None, (tmp / "prometheus.log").read_text()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{url}/-/ready", timeout=2).status_code == 200:
                    break
            assert time.monotonic() < deadline, "prometheus not ready:\n" + (tmp / "prometheus.log").read_text()
            time.sleep(0.2)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def query(url: str, expr: str) -> list[dict]:
    r = httpx.get(f"{url}/api/v1/query", params={"query": expr}, timeout=10)
    body = r.json()
    assert r.status_code == 200 and body["status"] == "success", f"{expr}: {body}"
    return body["data"]["result"]


def direct_count(server, route: str) -> float:
    for family in text_string_to_metric_families(scrape(server)):
        if family.name == "campusguard_request_duration_seconds":
            return sum(s.value for s in family.samples if s.name.endswith("_count") and s.labels["route"] == route)
    raise AssertionError("no latency histogram")


def test_prometheus_reads_back_the_latency_histogram(prometheus, live_server, bus_jpg):
    up = wait_for(lambda: [r for r in query(prometheus, 'up{job="campusguard"}') if r["value"][1] == "1"], step=0.5)
    assert up, "timed out waiting for the service to be scraped"
    assert up[0]["metric"]["replica"] == "127.0.0.1", "the shipped relabelling sets replica"
    with live_server.client() as client:
        for camera in ("gate-east", "gate-west", CAMERA):
            assert detect(client, bus_jpg, camera).status_code == 200
    expected = direct_count(live_server, "/detect")
    assert expected >= 7

    def count_in_prometheus():
        result = query(prometheus, 'sum(campusguard_request_duration_seconds_count{job="campusguard",route="/detect"})')
        return result and float(result[0]["value"][1]) == expected

    assert wait_for(count_in_prometheus, step=0.5), f"timed out waiting for {expected} /detect requests in Prometheus"
    buckets = query(prometheus, 'campusguard_request_duration_seconds_bucket{job="campusguard",route="/detect"}')
    by_le = {b["metric"]["le"]: float(b["value"][1]) for b in buckets}
    assert sorted(float(le) for le in by_le) == sorted(LATENCY_BUCKETS) + [math.inf]
    assert by_le["+Inf"] == expected
    values = [by_le[k] for k in sorted(by_le, key=lambda le: math.inf if le == "+Inf" else float(le))]
    assert values == sorted(values), "cumulative buckets"
    (median,) = query(prometheus, 'histogram_quantile(0.5, sum by (le) '
                                  '(campusguard_request_duration_seconds_bucket{job="campusguard",route="/detect"}))')
    assert 0 < float(median["value"][1]) < 60


def test_alert_rules_evaluate_cleanly_on_real_series(prometheus):
    names = {rule["alert"] for rule in alert_rules()}

    def rules_ok():
        groups = httpx.get(f"{prometheus}/api/v1/rules", timeout=10).json()["data"]["groups"]
        rules = [r for g in groups for r in g["rules"]]
        return {r["name"] for r in rules} == names and all(r["health"] == "ok" for r in rules) and rules

    rules = wait_for(rules_ok, step=0.5)
    assert rules, "timed out waiting for every alert rule evaluated with health ok"
    for rule in rules:
        assert not rule.get("lastError"), rule
    # nothing fires on a healthy replica (ready, fast enough on CPU for one image at a time)
    firing = [a for a in httpx.get(f"{prometheus}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
              if a["labels"]["alertname"] in {"CampusGuardReplicaNotReady", "CampusGuardVramHigh"}]
    assert firing == []


def test_dashboard_queries_return_data(prometheus, live_server, bus_jpg):
    with live_server.client() as client:  # fresh samples inside the rate() windows
        assert detect(client, bus_jpg).status_code == 200
    time.sleep(3)
    must_have_data = {"Replicas ready", "Request latency p50 / p95 / p99", "Stage latency p50 / p95 / p99",
                      "Batch size (images per inference)", "Queue depth", "VRAM per GPU",
                      "Detections/s by class", "Detections/s by camera", "Requests/s by route and status",
                      "HTTP errors by status", "Build", "Camera stream state",
                      "Stream frames/s read, sent, dropped by camera"}
    seen = set()
    for q in dashboard_queries():
        if q.expr.startswith("label_values("):
            continue
        result = query(prometheus, grafana_to_promql(q.expr))  # asserts the query runs
        title = q.where.split("'")[1] if "'" in q.where else q.where
        if result and title in must_have_data:
            seen.add(title)
    assert seen == must_have_data, f"no data for {must_have_data - seen}"
    replicas = query(prometheus, "group by (replica) (campusguard_ready)")
    assert [r["metric"]["replica"] for r in replicas] == ["127.0.0.1"]
