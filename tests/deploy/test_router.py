"""The Kubernetes router (#26): every frame of a camera reaches one detector pod.

deploy/k8s/base/router-*.yaml put nginx, hashing on the camera id, in front of the detector
pods, whose addresses endpoints.sh reads from the headless Service and writes into nginx's
upstreams, reloading nginx when pods come and go. Checked here: the manifests are wired to each
other; the router's nginx.conf is compose's wherever it does not have to differ; and, with the
real nginx (tests/deploy/router_util.py), a camera's requests stick to one pod, cameras spread,
a pod added or removed moves only the cameras it takes or held, and before any pod is ready the
router answers the service's JSON 502.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections import Counter

import httpx
import kubernetes_validate
import pytest

from tests.deploy.conftest import K8S, NGINX_CONF, load_yaml_all
from tests.deploy.router_util import router_files, running_router
from tests.support.k8s_render import RENDERS, VERSIONS, named, render
from tests.support.load_balancer import KEYED, Replica, post
from tests.support.net import free_port


@pytest.fixture(scope="module", params=sorted(RENDERS))
def rendered(request) -> tuple[str, list[dict]]:
    return request.param, render(RENDERS[request.param])


# --- manifests ------------------------------------------------------------------------------
def test_router_is_wired_to_its_config_and_the_detector_pods(rendered):
    _, resources = rendered
    router = named(resources, "Deployment", "campusguard-router")
    detector = named(resources, "Deployment", "campusguard-detector")
    pod = router["spec"]["template"]["spec"]
    nginx, endpoints = pod["containers"]
    assert nginx["image"] == endpoints["image"] and re.fullmatch(r"nginx:1\.2[89]\.\d+", nginx["image"])
    assert pod["shareProcessNamespace"] is True, "endpoints.sh signals nginx's master"
    volumes = {v["name"]: v for v in pod["volumes"]}
    config = named(resources, "ConfigMap", volumes["config"]["configMap"]["name"])
    assert set(config["data"]) == {"nginx.conf", "endpoints.sh"}
    for container in (nginx, endpoints):
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert mounts["config"] == "/etc/campusguard-router" and mounts["tmp"] == "/tmp", "one /tmp: pid and list shared"
    command = " ".join(nginx["command"] + nginx["args"])
    assert "endpoints.sh --once" in command and "nginx -c /etc/campusguard-router/nginx.conf" in command
    assert endpoints["command"][-1] == "/etc/campusguard-router/endpoints.sh"
    env = {e["name"]: e["value"] for e in endpoints["env"]}
    headless = named(resources, "Service", env["ROUTER_DETECTORS"])
    assert headless["spec"]["clusterIP"] == "None" and not headless["spec"].get("publishNotReadyAddresses")
    pod_labels = detector["spec"]["template"]["metadata"]["labels"]
    assert all(pod_labels[k] == v for k, v in headless["spec"]["selector"].items())
    detector_port = next(p for p in detector["spec"]["template"]["spec"]["containers"][0]["ports"] if p["name"] == "http")
    assert int(env["ROUTER_DETECTOR_PORT"]) == detector_port["containerPort"] == headless["spec"]["ports"][0]["port"]
    # the Service clients use selects the router pods on nginx's port
    service = named(resources, "Service", "campusguard-router")
    router_labels = router["spec"]["template"]["metadata"]["labels"]
    assert router_labels["app.kubernetes.io/component"] == "router", "the detectors' NetworkPolicy admits this label"
    assert all(router_labels[k] == v for k, v in service["spec"]["selector"].items())
    assert service["spec"]["ports"][0]["targetPort"] in {p["name"] for p in nginx["ports"]}
    assert {p["containerPort"] for p in nginx["ports"]} == {int(m) for m in re.findall(r"listen\s+(\d+);", config["data"]["nginx.conf"])}
    # worker_processes = the CPU limit (auto would count the node's cores)
    workers = int(re.search(r"^worker_processes\s+(\d+);", config["data"]["nginx.conf"], re.M).group(1))
    assert workers == int(nginx["resources"]["limits"]["cpu"])
    assert named(resources, "PodDisruptionBudget", "campusguard-router")["spec"]["selector"]["matchLabels"] == \
        router["spec"]["selector"]["matchLabels"]


def test_router_policy_admits_the_clients_and_reaches_dns_and_the_detectors(rendered):
    _, resources = rendered
    policy = named(resources, "NetworkPolicy", "campusguard-router")
    router_labels = named(resources, "Deployment", "campusguard-router")["spec"]["template"]["metadata"]["labels"]
    assert all(router_labels[k] == v for k, v in policy["spec"]["podSelector"]["matchLabels"].items())
    assert set(policy["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    (ingress,) = policy["spec"]["ingress"]
    assert ingress["ports"] == [{"port": 8000, "protocol": "TCP"}]
    sources = [(p.get("namespaceSelector", {}).get("matchLabels", {}).get("kubernetes.io/metadata.name"),
                p["podSelector"]["matchLabels"]) for p in ingress["from"]]
    gateway_labels = named(resources, "Deployment", "campusguard-gateway")["spec"]["template"]["metadata"]["labels"]
    assert sources == [("ingress-nginx", {"app.kubernetes.io/name": "ingress-nginx"}),
                       (None, {"app.kubernetes.io/component": gateway_labels["app.kubernetes.io/component"]})]
    dns, detectors = policy["spec"]["egress"]
    assert {p["port"] for p in dns["ports"]} == {53}
    assert detectors["to"] == [{"podSelector": {"matchLabels": {"app.kubernetes.io/name": "campusguard-detector"}}}]
    assert detectors["ports"] == [{"port": 8000, "protocol": "TCP"}]


@pytest.mark.parametrize("version", VERSIONS)
def test_the_ingress_examples_validate(version):
    for name in ("ingress-tls.yaml", "ingress-hash-by.yaml"):
        for doc in load_yaml_all(K8S / "examples" / name):
            kubernetes_validate.validate(doc, version, strict=True)
    (hashed,) = load_yaml_all(K8S / "examples/ingress-hash-by.yaml")
    assert hashed["metadata"]["annotations"]["nginx.ingress.kubernetes.io/upstream-hash-by"] == "$arg_camera_id"


def _blocks(text: str, opener: str) -> list[str]:
    """Each brace block starting with a line matching ``opener`` (comments dropped)."""
    lines = [re.sub(r"\s+#.*$", "", line) for line in text.splitlines() if not line.lstrip().startswith("#")]
    out, depth, current = [], 0, None
    for line in lines:
        if current is None and re.match(opener, line.strip()):
            current, depth = [], 0
        if current is not None:
            current.append(line.strip())
            depth += line.count("{") - line.count("}")
            if depth == 0 and "{" in "".join(current):
                out.append("\n".join(current))
                current = None
    return out


def test_router_config_is_composes_where_it_need_not_differ():
    """The camera-id key, the edge check, limits, retries and refusals are compose's, line for line."""
    router, compose = router_files()["nginx.conf"], NGINX_CONF.read_text()
    for opener in (r"map\s", r"location\s", r"server\s*\{$"):
        mine, theirs = _blocks(router, opener), _blocks(compose, opener)
        if opener.startswith("server"):  # the edge check's own server (the unix socket)
            mine, theirs = ([b for b in blocks if "listen unix:" in b] for blocks in (mine, theirs))
        if opener.startswith("location"):  # no HTTP->HTTPS redirect; the admin allow-list moves to the ingress
            theirs = [b.replace("include /tmp/campusguard/admin-allow.conf;\n", "") for b in theirs
                      if "https-redirect" not in b]
            theirs.remove(next(b for b in theirs if b.startswith("location = /lb-health")))  # the redirect server's
        assert mine and sorted(mine) == sorted(theirs), opener
    directive = re.compile(r"^\s*(limit_req_zone|limit_conn_zone|proxy_next_upstream\w*|proxy_\w+_timeout|"
                           r"client_\w+|hash)\s.*;", re.M)
    assert sorted(m.group(0).strip() for m in directive.finditer(router)) == \
        sorted(m.group(0).strip() for m in directive.finditer(compose))
    assert "resolve" not in re.sub(r"#.*", "", router), "no nginx-plus / >= 1.27.3 feature: the list is rendered"


def test_endpoints_reads_every_address_with_glibc_getent(tmp_path):
    """The real `getent ahostsv4` (as in the Debian nginx image) through endpoints.sh --once."""
    script = tmp_path / "endpoints.sh"
    script.write_text(router_files()["endpoints.sh"])
    env = {**os.environ, "ROUTER_DETECTORS": "localhost", "ROUTER_OUT": str(tmp_path / "out")}
    subprocess.run(["sh", str(script), "--once"], env=env, check=True, capture_output=True)
    lines = [line for line in (tmp_path / "out/detectors.conf").read_text().splitlines() if not line.startswith("#")]
    assert lines == ["server 127.0.0.1:8000 max_fails=3 fail_timeout=5s;"]
    # a name nobody answers: the `down` placeholder keeps nginx's config valid
    env["ROUTER_DETECTORS"], env["ROUTER_OUT"] = "campusguard-detector-pods.invalid", str(tmp_path / "none")
    subprocess.run(["sh", str(script), "--once"], env=env, check=True, capture_output=True)
    assert "server 127.0.0.1:9 down;" in (tmp_path / "none/detectors.conf").read_text()


# --- the real nginx -------------------------------------------------------------------------
PODS = [f"127.0.0.{i}" for i in range(2, 6)]


@pytest.fixture(scope="module")
def pods():
    port = free_port()
    replicas = [Replica(i, host, port) for i, host in enumerate(PODS)]
    yield port, replicas
    for r in replicas:
        r.server.shutdown()


def owners(client: httpx.Client, cameras: list[str]) -> dict[str, int]:
    out = {}
    for cam in cameras:
        r = post(client, cam)
        assert r.status_code == 200, r.text
        out[cam] = r.json()["replica"]
    return out


def test_router_sticks_cameras_and_follows_pods_added_and_removed(tmp_path, pods):
    port, replicas = pods
    cameras = [f"cam-{i}" for i in range(48)]
    with running_router(tmp_path, PODS[:3], port) as router, \
            httpx.Client(base_url=router.url, timeout=10, headers=KEYED) as client:
        first = owners(client, cameras)
        for _ in range(2):
            assert owners(client, cameras) == first, "a camera moved without a pod change"
        assert set(first.values()) == {0, 1, 2}, Counter(first.values())
        for cam in cameras[:8]:  # its own routes meet the replica of its frames
            for path in (f"/cameras/{cam}", f"/cameras/{cam}/source", f"/admin/cameras/{cam}/reset"):
                assert client.post(path).json()["replica"] == first[cam], path
        assert len(Counter(post(client, None).json()["replica"] for _ in range(30))) == 3, "no camera: spread"

        # a pod added (scale up): only the cameras it takes move, all to it
        since = router.reloads()
        router.set_pods(PODS[:4])
        router.wait_reloaded(PODS[:4], since)
        grown = owners(client, cameras)
        moved = {cam for cam in cameras if grown[cam] != first[cam]}
        assert moved and {grown[cam] for cam in moved} == {3}, grown
        assert len(moved) < len(cameras) / 2, f"{len(moved)} of {len(cameras)} cameras moved for one pod added"
        assert owners(client, cameras) == grown

        # a pod removed (scale down; it still answers, so nothing here is failover): only its cameras move
        since = router.reloads()
        router.set_pods([PODS[0], PODS[2], PODS[3]])
        router.wait_reloaded([PODS[0], PODS[2], PODS[3]], since)
        replicas[1].hits = 0
        shrunk = owners(client, cameras)
        assert replicas[1].hits == 0 and 1 not in shrunk.values()
        assert all(shrunk[cam] == grown[cam] for cam in cameras if grown[cam] != 1)
        assert {cam for cam in cameras if shrunk[cam] != grown[cam]} == {cam for cam in cameras if grown[cam] == 1}

        # DNS answers nothing for a moment: the last list stays, cameras keep their pods
        router.set_pods([])
        since = router.reloads()
        time.sleep(1.5)  # several polls
        assert router.reloads() == since and owners(client, cameras) == shrunk


def test_router_without_a_ready_pod_answers_json_502_then_routes(tmp_path, pods):
    port, _ = pods
    with running_router(tmp_path, [], port) as router, \
            httpx.Client(base_url=router.url, timeout=10, headers=KEYED) as client:
        r = post(client, "cam-1")
        assert r.status_code == 502 and r.json()["error"] == "upstream_unavailable"
        since = router.reloads()
        router.set_pods(PODS[:2])
        router.wait_reloaded(PODS[:2], since)
        assert post(client, "cam-1").status_code == 200
