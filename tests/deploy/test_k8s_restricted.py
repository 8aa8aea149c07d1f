"""Kubernetes: the Pod Security Standard "restricted", a NetworkPolicy, no secret in the base.

Read from the rendered base and NVIDIA overlay (tests/deploy/test_k8s.py's renderer). checkov
checks the same files with its own rules (tests/deploy/test_checkov.py); these are the
project's own decisions, each as the pod spec states it.
"""

from __future__ import annotations

import ipaddress
import re

import pytest

from tests.deploy.conftest import DEPLOY, K8S, load_yaml_all
from tests.support.k8s_render import RENDERS, named, one, render


@pytest.fixture(scope="module", params=sorted(RENDERS))
def rendered(request) -> tuple[str, list[dict]]:
    return request.param, render(RENDERS[request.param])


def test_pods_meet_the_restricted_standard(rendered):
    name, resources = rendered
    namespace = one(resources, "Namespace")["metadata"]["labels"]
    assert namespace["pod-security.kubernetes.io/enforce"] == "restricted"
    deployments = {d["metadata"]["name"]: d for d in resources if d["kind"] == "Deployment"}
    assert set(deployments) == {"campusguard-detector", "campusguard-gateway", "campusguard-router"}
    for dep_name, dep in deployments.items():
        pod = dep["spec"]["template"]["spec"]
        assert pod["automountServiceAccountToken"] is False, dep_name
        assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] >= 10000
        assert pod["securityContext"]["fsGroup"] == 100, "the secret files (0440) are the pod group's"
        seccomp = pod["securityContext"]["seccompProfile"]
        if name == "nvidia" or dep_name != "campusguard-detector":  # gateway and router need no GPU calls
            assert seccomp == {"type": "RuntimeDefault"}, dep_name
        else:
            assert seccomp == {"type": "Localhost", "localhostProfile": "campusguard/rocm-numa.json"}
        containers = pod["containers"]
        assert len(containers) == (2 if dep_name == "campusguard-router" else 1), dep_name
        volumes = {v["name"]: v for v in pod["volumes"]}
        for container in containers:
            ctx = container["securityContext"]
            assert ctx["allowPrivilegeEscalation"] is False and ctx["readOnlyRootFilesystem"] is True, dep_name
            assert ctx["capabilities"] == {"drop": ["ALL"]}, dep_name
            # where the pod writes: emptyDir volumes (and the read-only mounts)
            for mount in container["volumeMounts"]:
                assert mount.get("readOnly") or "emptyDir" in volumes[mount["name"]], mount
            assert {m["mountPath"] for m in container["volumeMounts"] if "emptyDir" in volumes[m["name"]]} >= {"/tmp"}
            # secrets as files, none in the environment
            assert all("secretRef" not in e for e in container.get("envFrom", [])), dep_name
            assert all("secretKeyRef" not in e.get("valueFrom", {}) for e in container.get("env", [])), dep_name
            requests, limits = container["resources"]["requests"], container["resources"]["limits"]
            assert requests["cpu"] and requests["memory"] and limits["memory"]
            if dep_name == "campusguard-detector":
                assert "cpu" not in limits, "decided: no CPU limit on a GPU feeder (the reason is inline)"
            else:
                assert limits["cpu"], "no GPU to feed: gateway and router have a CPU limit"
        secret_volumes = [v["secret"] for v in volumes.values() if "secret" in v]
        assert all(v["defaultMode"] == 0o440 for v in secret_volumes), dep_name
        if dep_name == "campusguard-router":
            assert not secret_volumes, "the router holds no secret: the replicas check the keys"
        else:
            assert secret_volumes, dep_name
        if dep_name == "campusguard-detector":
            assert volumes["secrets"]["secret"]["secretName"] == "campusguard-secrets"


def test_every_skip_is_written_inline_with_a_reason():
    for dep in (r for r in render(K8S / "base") if r["kind"] == "Deployment"):
        skips = {k: v for k, v in dep["metadata"]["annotations"].items() if k.startswith("checkov.io/skip")}
        assert skips
        for value in skips.values():
            check, _, reason = value.partition("=")
            assert re.fullmatch(r"CKV2?_K8S_\d+", check) and len(reason) > 40, value


def test_network_policy_allows_what_the_service_needs_and_nothing_else(rendered):
    _, resources = rendered
    policy = named(resources, "NetworkPolicy", "campusguard-detector")
    pod_labels = named(resources, "Deployment", "campusguard-detector")["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels[k] == v for k, v in policy["spec"]["podSelector"]["matchLabels"].items())
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    (ingress,) = policy["spec"]["ingress"]
    assert ingress["ports"] == [{"port": 8000, "protocol": "TCP"}]
    sources = [{**p.get("podSelector", {}).get("matchLabels", {}),
                **{"ns": p.get("namespaceSelector", {}).get("matchLabels", {}).get("kubernetes.io/metadata.name")}}
               for p in ingress["from"]]
    # the router, Prometheus and the other replicas; clients and gateways only through the router (#26)
    assert sorted(map(sorted, (s.items() for s in sources))) == sorted(map(sorted, (d.items() for d in (
        {"app.kubernetes.io/name": "prometheus", "ns": "monitoring"}, {"app.kubernetes.io/component": "router", "ns": None},
        {"app.kubernetes.io/name": "campusguard-detector", "ns": None})))), sources
    egress = policy["spec"]["egress"]
    ports = [{p["port"] for p in rule["ports"]} for rule in egress]
    assert ports[0] == {53}, "DNS"
    assert [ports[1], ports[2], ports[3], ports[4]] == [{5432}, {443}, {1883, 8883}, {554, 80, 443}]
    for rule in egress[1:5]:
        (peer,) = rule["to"]
        ipaddress.ip_network(peer["ipBlock"]["cidr"])  # a real CIDR, documented as a variable
    text = (K8S / "base/networkpolicy.yaml").read_text()
    assert all(name in text for name in ("POSTGRES_CIDR", "WEBHOOK_CIDR", "MQTT_CIDR", "CAMERA_CIDR"))


def test_the_gateway_policy_admits_nothing_and_reaches_dns_the_router_and_cameras(rendered):
    _, resources = rendered
    policy = named(resources, "NetworkPolicy", "campusguard-gateway")
    gateway = named(resources, "Deployment", "campusguard-gateway")
    router = named(resources, "Deployment", "campusguard-router")
    pod_labels = gateway["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels[k] == v for k, v in policy["spec"]["podSelector"]["matchLabels"].items())
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    assert policy["spec"]["ingress"] == [], "nothing connects to a gateway (exec probes)"
    dns, routers, cameras = policy["spec"]["egress"]
    assert {p["port"] for p in dns["ports"]} == {53}
    (peer,) = routers["to"]
    router_labels = router["spec"]["template"]["metadata"]["labels"]
    assert all(router_labels[k] == v for k, v in peer["podSelector"]["matchLabels"].items())
    assert routers["ports"] == [{"port": 8000, "protocol": "TCP"}]
    (peer,) = cameras["to"]
    ipaddress.ip_network(peer["ipBlock"]["cidr"])
    assert {p["port"] for p in cameras["ports"]} == {554, 80, 443}
    assert "CAMERA_CIDR" in (K8S / "base/gateway-networkpolicy.yaml").read_text()
    # the router's policy admits the gateway's pods
    ingress = named(resources, "NetworkPolicy", "campusguard-router")["spec"]["ingress"][0]["from"]
    assert any(all(pod_labels.get(k) == v for k, v in p.get("podSelector", {}).get("matchLabels", {}).items())
               and "namespaceSelector" not in p for p in ingress)


def test_every_raw_manifest_names_its_namespace():
    for path in sorted((K8S / "base").glob("*.yaml")):
        if path.name in {"kustomization.yaml", "namespace.yaml"}:
            continue
        for doc in load_yaml_all(path):
            assert doc["metadata"].get("namespace") == "campusguard", path.name


def test_the_ingress_example_has_tls_from_cert_manager():
    (ingress,) = load_yaml_all(K8S / "examples/ingress-tls.yaml")
    assert ingress["kind"] == "Ingress" and ingress["spec"]["tls"][0]["secretName"]
    assert "cert-manager.io/cluster-issuer" in ingress["metadata"]["annotations"]
    assert ingress["spec"]["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"] == "campusguard-router"
    assert (DEPLOY / "seccomp/rocm-numa.json").is_file()
