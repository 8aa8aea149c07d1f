"""deploy/k8s: manifests valid for a recent Kubernetes, and wired to each other.

kubernetes-validate checks every core-kind manifest strictly (unknown fields fail) against
the newest Kubernetes schema it ships and the oldest we support. ServiceMonitor is a CRD
(prometheus-operator), for which kubernetes-validate has no schema; it is validated against
deploy/k8s/schemas/servicemonitor-monitoring-v1.json, a strict subset of the CRD's OpenAPI
schema shipped with the manifests. The kustomize overlay is rendered here (resources,
namespace, images, JSON 6902 patches: the features we use) and validated the same way.
"""

from __future__ import annotations

import copy
import json
import re

import jsonschema
import kubernetes_validate
import pytest

from tests.deploy.conftest import K8S, hpa_queries, load_yaml
from tests.support.k8s_render import CLUSTER_SCOPED, RENDERS, VERSIONS, json_patch, named, one, render

CRD_SCHEMAS = {("monitoring.coreos.com/v1", "ServiceMonitor"): K8S / "schemas/servicemonitor-monitoring-v1.json"}


@pytest.fixture(scope="module", params=sorted(RENDERS))
def rendered(request) -> tuple[str, list[dict]]:
    return request.param, render(RENDERS[request.param])


# --- validation ----------------------------------------------------------------------------
@pytest.mark.parametrize("version", VERSIONS)
def test_manifests_validate(rendered, version):
    _, resources = rendered
    assert resources
    for res in resources:
        key = (res["apiVersion"], res["kind"])
        if key in CRD_SCHEMAS:
            schema = json.loads(CRD_SCHEMAS[key].read_text())
            jsonschema.Draft7Validator.check_schema(schema)
            jsonschema.Draft7Validator(schema).validate(res)
        else:
            # raises ValidationError, or SchemaNotFoundError for a kind it does not know
            kubernetes_validate.validate(res, version, strict=True)


def test_every_file_is_a_resource_of_the_kustomization():
    base = K8S / "base"
    listed = set(load_yaml(base / "kustomization.yaml")["resources"])
    assert listed == {p.name for p in base.glob("*.yaml")} - {"kustomization.yaml"}


def test_crd_schema_rejects_typos():
    res = one(render(K8S / "base"), "ServiceMonitor")
    schema = json.loads(CRD_SCHEMAS[("monitoring.coreos.com/v1", "ServiceMonitor")].read_text())
    broken = copy.deepcopy(res)
    broken["spec"]["endpoints"][0]["intervall"] = "5s"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)
    broken = copy.deepcopy(res)
    broken["spec"]["endpoints"][0]["interval"] = "5 seconds"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(broken, schema)


# --- wiring --------------------------------------------------------------------------------
def test_gpu_requests(rendered):
    name, resources = rendered
    container = named(resources, "Deployment", "campusguard-detector")["spec"]["template"]["spec"]["containers"][0]
    gpu, other = ("amd.com/gpu", "nvidia.com/gpu") if name == "base" else ("nvidia.com/gpu", "amd.com/gpu")
    for section in ("requests", "limits"):
        assert container["resources"][section][gpu] == 1
        assert other not in container["resources"][section]
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    assert ("rocm" if name == "base" else "cuda") in container["image"]
    assert container["image"].startswith("registry.example.com/campusguard/campusguard-detector:")


def test_probes_and_rollout(rendered):
    _, resources = rendered
    dep = named(resources, "Deployment", "campusguard-detector")
    container = dep["spec"]["template"]["spec"]["containers"][0]
    assert container["readinessProbe"]["httpGet"]["path"] == "/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/health/live"
    assert container["startupProbe"]["httpGet"]["path"] == "/health/live"
    port_names = {p["name"] for p in container["ports"]}
    for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
        assert container[probe]["httpGet"]["port"] in port_names
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}
    pod = dep["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] and pod["securityContext"]["runAsUser"] != 0
    config = named(resources, "ConfigMap", "campusguard-config")
    assert pod["terminationGracePeriodSeconds"] > float(config["data"]["CAMPUSGUARD_DRAIN_TIMEOUT_S"]) + 5


def test_selectors_and_references_match(rendered):
    _, resources = rendered
    dep, svc = named(resources, "Deployment", "campusguard-detector"), named(resources, "Service", "campusguard-detector")
    pod_labels = dep["spec"]["template"]["metadata"]["labels"]
    container = dep["spec"]["template"]["spec"]["containers"][0]

    def selects(selector: dict, labels: dict) -> bool:
        return all(labels.get(k) == v for k, v in selector.items())

    assert selects(dep["spec"]["selector"]["matchLabels"], pod_labels)
    assert selects(svc["spec"]["selector"], pod_labels)
    assert selects(named(resources, "PodDisruptionBudget", "campusguard-detector")["spec"]["selector"]["matchLabels"], pod_labels)
    assert {p["targetPort"] for p in svc["spec"]["ports"]} <= {p["name"] for p in container["ports"]}
    refs = {("ConfigMap", e["configMapRef"]["name"]) for e in container["envFrom"] if "configMapRef" in e}
    refs |= {("Secret", e["secretRef"]["name"]) for e in container["envFrom"] if "secretRef" in e}
    for volume in dep["spec"]["template"]["spec"]["volumes"]:
        if "persistentVolumeClaim" in volume:
            refs.add(("PersistentVolumeClaim", volume["persistentVolumeClaim"]["claimName"]))
        if "configMap" in volume:
            refs.add(("ConfigMap", volume["configMap"]["name"]))
    present = {(r["kind"], r["metadata"]["name"]) for r in resources}
    assert refs <= present and ("ConfigMap", "campusguard-config") in refs and ("ConfigMap", "campusguard-site") in refs
    # the one Secret is created at the site from deploy/secrets (the base ships no value)
    secrets = {v["secret"]["secretName"] for v in dep["spec"]["template"]["spec"]["volumes"] if "secret" in v}
    assert secrets == {"campusguard-secrets"} and "Secret" not in {r["kind"] for r in resources}
    hpa = one(resources, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": dep["metadata"]["name"]}
    assert 1 <= hpa["spec"]["minReplicas"] < hpa["spec"]["maxReplicas"]
    # ServiceMonitor -> Service port; job label = "campusguard", as the alert rules expect
    smon = one(resources, "ServiceMonitor")
    assert selects(smon["spec"]["selector"]["matchLabels"], svc["metadata"]["labels"])
    assert {e["port"] for e in smon["spec"]["endpoints"]} <= {p["name"] for p in svc["spec"]["ports"]}
    assert svc["metadata"]["labels"][smon["spec"]["jobLabel"]] == "campusguard"
    assert smon["spec"]["endpoints"][0]["path"] == "/metrics"
    relabel = smon["spec"]["endpoints"][0]["relabelings"][0]
    assert relabel["targetLabel"] == "replica", "the dashboard's $replica variable"
    ns = {r["metadata"].get("namespace") for r in resources if r["kind"] not in CLUSTER_SCOPED}
    assert ns == {one(resources, "Namespace")["metadata"]["name"]}


def test_hpa_metric_is_served_by_the_adapter():
    hpa = one(render(K8S / "base"), "HorizontalPodAutoscaler")
    (metric,) = hpa["spec"]["metrics"]
    assert metric["type"] == "Pods" and metric["pods"]["target"]["type"] == "AverageValue"
    rules = load_yaml(K8S / "prometheus-adapter/values.yaml")["rules"]["custom"]
    served = {rule["name"]["as"] for rule in rules}
    assert metric["pods"]["metric"]["name"] in served
    for rule in rules:
        assert 'namespace!=""' in rule["seriesQuery"] and 'pod!=""' in rule["seriesQuery"]
        assert set(rule["resources"]["overrides"]) == {"namespace", "pod"}
    assert {q.expr.split("{")[0] for q in hpa_queries()} == {"campusguard_queue_depth"}


def test_configmap_holds_valid_settings():
    from app.config import Settings

    resources = render(K8S / "base")
    data = named(resources, "ConfigMap", "campusguard-config")["data"]
    fields = {}
    for key, value in data.items():
        assert key.startswith("CAMPUSGUARD_"), key
        name = key[len("CAMPUSGUARD_"):].lower()
        assert name in Settings.model_fields, key
        fields[name] = value
    files = {k: v for k, v in fields.items() if k.endswith("_file")}
    assert set(files) == {"api_keys_file", "webhook_secret_file", "events_db_url_file"}
    pod = named(resources, "Deployment", "campusguard-detector")["spec"]["template"]["spec"]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "secrets")
    assert all(path.startswith(mount["mountPath"] + "/") for path in files.values())
    fields = {k: v for k, v in fields.items() if k not in files}
    settings = Settings(_env_file=None, **fields)  # raises on an invalid value
    assert settings.device == "cuda:0" and settings.port == 8000


def test_detectors_trust_the_router_pods_only_never_any_peer(rendered):
    """Issue 42, finding 4: with "*" any pod that reached a detector chose the address the
    failed-key throttle and the audit trail see. The detectors believe X-Forwarded-For from the
    pod network only (POD_CIDR, the placeholder the router's set_real_ip_from uses too), which
    the NetworkPolicy narrows to the router, Prometheus and the other detectors; an overlay sets
    it with a ConfigMap patch."""
    import ipaddress

    _, resources = rendered
    value = named(resources, "ConfigMap", "campusguard-config")["data"]["CAMPUSGUARD_FORWARDED_ALLOW_IPS"]
    assert "*" not in value
    nets = [ipaddress.ip_network(part.strip()) for part in value.split(",")]  # addresses or CIDRs only
    router_conf = named(resources, "ConfigMap", "campusguard-router")["data"]
    pattern = r"set_real_ip_from\s+(\S+);\s*# POD_CIDR"
    (pod_cidr,) = {m for text in router_conf.values() for m in re.findall(pattern, text)}
    assert nets == [ipaddress.ip_network(pod_cidr)], "the same documented pod network as the router's"
    assert "POD_CIDR" in (K8S / "base/configmap.yaml").read_text()
    assert "POD_CIDR" in (K8S.parents[1] / "docs/deploy.md").read_text()
    policy = named(resources, "NetworkPolicy", "campusguard-detector")["spec"]
    (rule,) = policy["ingress"]
    assert {"router", "prometheus", "campusguard-detector"} == {
        next(iter(peer["podSelector"]["matchLabels"].values())) for peer in rule["from"]}, "who may connect"
    patched = json_patch(named(resources, "ConfigMap", "campusguard-config"), [
        {"op": "replace", "path": "/data/CAMPUSGUARD_FORWARDED_ALLOW_IPS", "value": "10.42.0.0/16"}])
    assert patched["data"]["CAMPUSGUARD_FORWARDED_ALLOW_IPS"] == "10.42.0.0/16"


def test_rules_on_with_the_site_file_and_the_shared_event_store(tmp_path):
    """The site file comes from a ConfigMap mounted read-only where CAMPUSGUARD_SITE_CONFIG points
    (and is a valid site file); the event store URL from a Secret, a PostgreSQL URL."""
    from sqlalchemy.engine import make_url

    from app.rules.site.loader import load_site_config

    resources = render(K8S / "base")
    config = named(resources, "ConfigMap", "campusguard-config")["data"]
    pod = named(resources, "Deployment", "campusguard-detector")["spec"]["template"]["spec"]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "site")
    volume = next(v for v in pod["volumes"] if v["name"] == "site")
    assert mount["readOnly"] and config["CAMPUSGUARD_SITE_CONFIG"] == f"{mount['mountPath']}/site.yaml"
    site = named(resources, "ConfigMap", volume["configMap"]["name"])["data"]["site.yaml"]
    (tmp_path / "site.yaml").write_text(site)
    assert load_site_config(tmp_path / "site.yaml") == load_site_config(K8S.parent / "site.example.yaml")
    assert config["CAMPUSGUARD_EVENTS_DB_URL_FILE"].endswith("/events-db-url"), "the URL is a file of the Secret"
    assert "CAMPUSGUARD_EVENTS_DB_URL" not in config, "credentials belong in the Secret"
    assert make_url("postgresql+psycopg://u:p@h:5432/d?sslmode=verify-full").query["sslmode"] == "verify-full"


def test_threads_match_the_cpu_request(rendered):
    """os.cpu_count() in a pod is the node's cores: threads=0 would spin all of them per pod."""
    _name, resources = rendered
    data = named(resources, "ConfigMap", "campusguard-config")["data"]
    container = named(resources, "Deployment", "campusguard-detector")["spec"]["template"]["spec"]["containers"][0]
    assert int(data["CAMPUSGUARD_THREADS"]) == int(container["resources"]["requests"]["cpu"])


def test_camera_gateway(rendered):
    """Issue #24: a gateway Deployment pulls the cameras' streams (one pod, Recreate: never two on the
    same cameras), reads the same site file, posts through the router (#26) with a camera key, and
    the detectors' ingest is off."""
    import argparse

    from app.ingest.gateway import configure

    name, resources = rendered
    dep = named(resources, "Deployment", "campusguard-gateway")
    detector = named(resources, "Deployment", "campusguard-detector")
    assert dep["spec"]["replicas"] == 1 and dep["spec"]["strategy"]["type"] == "Recreate"
    pod = dep["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["command"] == ["campusguard", "gateway"]
    assert container["image"] == detector["spec"]["template"]["spec"]["containers"][0]["image"]
    assert ("rocm" if name == "base" else "cuda") in container["image"]
    assert not any("gpu" in r for r in container["resources"]["requests"]), "decoding needs no GPU here"
    parser = argparse.ArgumentParser()
    configure(parser)
    args = parser.parse_args(container["args"])  # the command line the gateway really accepts
    svc = named(resources, "Service", "campusguard-router")  # hashes on the camera id (#26), never the plain Service
    assert args.service == f"http://{svc['metadata']['name']}" and args.shard == "0/1"
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert f"{mounts['site']['mountPath']}/site.yaml" == str(args.site)
    assert volumes["site"]["configMap"]["name"] == "campusguard-site"
    # secrets as files from the Secrets the documented commands create (none in the base, #31):
    # only `camera-key` of campusguard-secrets, and the camera passwords as --secrets-dir
    assert not [r for r in resources if r["kind"] == "Secret"]
    assert "envFrom" not in container
    (key_env,) = container["env"]
    key_file = key_env["value"]
    assert key_env["name"] == "CAMPUSGUARD_GATEWAY_API_KEY_FILE" and "valueFrom" not in key_env
    assert key_file == f"{mounts['camera-key']['mountPath']}/camera-key"
    assert volumes["camera-key"]["secret"]["secretName"] == "campusguard-secrets"
    assert volumes["camera-key"]["secret"]["items"] == [{"key": "camera-key", "path": "camera-key"}]
    assert mounts["camera-secrets"]["mountPath"] == str(args.secrets_dir)
    assert volumes["camera-secrets"]["secret"]["secretName"] == "campusguard-camera-secrets"
    commands = (K8S / "base/kustomization.yaml").read_text()
    assert "create secret generic campusguard-camera-secrets" in commands and "secrets/cameras/" in commands
    assert "--from-file=deploy/secrets/camera-key" in commands
    assert str(args.heartbeat_file) in " ".join(container["livenessProbe"]["exec"]["command"])
    assert str(args.heartbeat_file).startswith(mounts["tmp"]["mountPath"] + "/")  # writable under a read-only root
    assert named(resources, "ConfigMap", "campusguard-config")["data"]["CAMPUSGUARD_INGEST"] == "off"
