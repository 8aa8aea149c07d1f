"""deploy/prometheus: promtool accepts the config and rules, and its unit tests fire each alert.

Needs Debian's `prometheus` package (promtool); `make system-deps` installs it. The tests
skip only when promtool is absent.
"""

from __future__ import annotations

import subprocess

import pytest
import yaml

from tests.deploy.conftest import (
    ALERT_RULES, ALERT_TESTS, PROMETHEUS_CONFIG, alert_rules, dashboard_queries, grafana_to_promql, load_yaml,
    require_tool,
)


@pytest.fixture(scope="module")
def promtool() -> str:
    return require_tool("promtool", "apt-get install prometheus, or `make system-deps`")


def run(promtool: str, *args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([promtool, *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_promtool_check_config(promtool):
    proc = run(promtool, "check", "config", str(PROMETHEUS_CONFIG))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout + proc.stderr


def test_promtool_check_rules(promtool):
    proc = run(promtool, "check", "rules", str(ALERT_RULES))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"SUCCESS: {len(alert_rules())} rules found" in proc.stdout


def test_promtool_test_rules_fire_each_alert(promtool):
    proc = run(promtool, "test", "rules", ALERT_TESTS.name, cwd=ALERT_TESTS.parent)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "SUCCESS" in proc.stdout


def test_alerts_required_by_the_issue_exist_and_are_tested():
    rules = {rule["alert"]: rule for rule in alert_rules()}
    required = {
        "CampusGuardP99LatencyHigh": "campusguard_request_duration_seconds_bucket",
        "CampusGuardHighErrorRate": "campusguard_requests_total",
        "CampusGuardQueueFull": 'status="503"',
        "CampusGuardVramHigh": "campusguard_device_memory_total_bytes",
        "CampusGuardReplicaNotReady": "campusguard_ready",
        "CampusGuardCacheClearsStalled": "campusguard_cache_clears_total",
        "CampusGuardAuthFailureBurst": "campusguard_auth_failures_total",  # issue 30: a brute-force burst
        "CampusGuardCameraStreamDown": 'campusguard_source_state{state="streaming"}',  # issue 24: a dead source
    }
    for name, needle in required.items():
        assert needle in rules[name]["expr"], name
    assert "histogram_quantile(0.99" in rules["CampusGuardP99LatencyHigh"]["expr"]
    for rule in rules.values():
        assert rule["labels"]["severity"] in {"warning", "critical"}
        assert rule["annotations"]["summary"] and rule["annotations"]["description"]
    # every alert is expected to fire in some promtool test case (and checked quiet in another)
    tests = load_yaml(ALERT_TESTS)
    assert tests["rule_files"] == ["../alerts.yml"]
    fired, quiet = set(), set()
    for case in tests["tests"]:
        for check in case.get("alert_rule_test", []):
            (fired if check["exp_alerts"] else quiet).add(check["alertname"])
    assert fired == set(rules), f"alerts never fired in tests: {set(rules) - fired}"
    assert quiet == set(rules), f"alerts never checked silent: {set(rules) - quiet}"


def test_rules_loaded_by_config():
    config = load_yaml(PROMETHEUS_CONFIG)
    assert [(PROMETHEUS_CONFIG.parent / f).resolve() for f in config["rule_files"]] == [ALERT_RULES.resolve()]


def test_dashboard_queries_are_valid_promql(promtool, tmp_path):
    """Each dashboard query, Grafana variables substituted, parses as PromQL (via promtool)."""
    queries = [q for q in dashboard_queries() if not q.expr.startswith("label_values(")]
    rules = {"groups": [{"name": "dashboard", "rules": [
        {"record": f"dashboard:query_{i}", "expr": grafana_to_promql(q.expr)} for i, q in enumerate(queries)]}]}
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump(rules))
    proc = run(promtool, "check", "rules", str(path))
    assert proc.returncode == 0, proc.stdout + proc.stderr + "\n" + "\n".join(f"{i}: {q.where}" for i, q in enumerate(queries))
