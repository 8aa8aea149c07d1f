"""The compose stack's hardening, read from the files (no Docker engine here).

Only the load balancer is published beyond loopback; every container drops its capabilities
and cannot gain new ones; the replicas have a read-only root, tmpfs where they write, memory
and pids limits and the shipped seccomp profile (no service is `unconfined` unless the
documented override is added); Prometheus has no lifecycle API; PostgreSQL is on an internal
network only the replicas join; every secret is a file made by init-secrets.sh, read through
a `_FILE` setting; .env.example holds no secret value.
"""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from tests.deploy.conftest import (
    COMPOSE, COMPOSE_NVIDIA, DEPLOY, detector_services, load_compose, merge_compose,
)
from tests.deploy.secrets_util import FILES

SECCOMP = DEPLOY / "seccomp/rocm-numa.json"
UNCONFINED = DEPLOY / "docker-compose.seccomp-unconfined.yml"
NUMA_CALLS = {"mbind", "set_mempolicy", "get_mempolicy", "set_mempolicy_home_node"}
# sha256 of the canonical JSON (sort_keys) of moby/profiles seccomp/v0.2.3 seccomp/default.json
DOCKER_DEFAULT_SHA256 = "2e0d5593d24ad449b9bacc2c7db1575a1acd90e7dc7acfcd916608e14a311294"


@pytest.fixture(scope="module")
def configs() -> dict[str, dict]:
    base = load_compose(COMPOSE)
    return {"amd": base, "nvidia": merge_compose(base, load_compose(COMPOSE_NVIDIA))}


def test_only_the_load_balancer_is_published_beyond_loopback(configs):
    for config in configs.values():
        for name, svc in config["services"].items():
            for port in svc.get("ports", []):
                assert name == "lb" or str(port).startswith("127.0.0.1:"), (name, port)
        assert {str(p).rsplit(":", 1)[1] for p in config["services"]["lb"]["ports"]} == {"8443", "8080"}


def test_every_container_drops_capabilities_and_privilege_gain(configs):
    for config in configs.values():
        for name, svc in config["services"].items():
            assert svc.get("cap_drop") == ["ALL"], name
            assert "no-new-privileges:true" in svc["security_opt"], name
            assert not any("unconfined" in opt for opt in svc["security_opt"]), name
            assert svc.get("read_only") is True, name
            assert "privileged" not in svc, name
            assert svc.get("mem_limit") and svc.get("pids_limit"), name
        # only postgres keeps what its entrypoint needs to hand the data folder to `postgres`
        added = {name: set(svc.get("cap_add", [])) for name, svc in config["services"].items() if svc.get("cap_add")}
        assert added == {"postgres": {"CHOWN", "DAC_OVERRIDE", "FOWNER", "SETGID", "SETUID"}}
        assert config["services"]["lb"]["user"] == "101:101"


def test_replicas_are_hardened(configs):
    for config in configs.values():
        replicas = detector_services(config)
        assert len(replicas) == 8
        for name, svc in replicas.items():
            assert "seccomp=${SECCOMP_PROFILE:-./seccomp/rocm-numa.json}" in svc["security_opt"], name
            assert any(t.startswith("/tmp:") for t in svc["tmpfs"]), name
            writable = [v for v in svc["volumes"] if not v.endswith(":ro")]
            assert writable == ["detector-cache:/var/cache/campusguard"], (name, writable)
            assert re.fullmatch(r"\$\{DETECTOR_MEM_LIMIT:-\d+g\}", svc["mem_limit"]), name
            assert re.fullmatch(r"\$\{DETECTOR_PIDS_LIMIT:-\d+\}", str(svc["pids_limit"])), name
            assert svc["environment"]["CAMPUSGUARD_SNAPSHOT_DIR"].startswith("/var/cache/campusguard/")
            assert svc["environment"]["CAMPUSGUARD_ONNX_CACHE_DIR"].startswith("/var/cache/campusguard/")


def test_gateways_are_hardened(configs):
    """The camera gateways (#24) run as the replicas do, without a GPU: Docker's default seccomp
    profile (no NUMA calls, nothing `unconfined`), nothing writable but the /tmp tmpfs, limits
    of their own, the edge network only (the load balancer and the cameras, not PostgreSQL),
    and their secrets as files: the camera key a Docker secret, the camera passwords the
    read-only SECRETS_DIR/cameras folder."""
    for config in configs.values():
        gateways = {name: svc for name, svc in config["services"].items() if name.startswith("gateway-")}
        assert gateways
        for name, svc in gateways.items():
            assert not any(opt.startswith("seccomp") for opt in svc["security_opt"]), name
            assert any(t.startswith("/tmp:") for t in svc["tmpfs"]), name
            assert all(v.endswith(":ro") for v in svc["volumes"]), name
            assert re.fullmatch(r"\$\{GATEWAY_MEM_LIMIT:-\d+g\}", svc["mem_limit"]), name
            assert re.fullmatch(r"\$\{GATEWAY_PIDS_LIMIT:-\d+\}", str(svc["pids_limit"])), name
            assert svc["networks"] == ["edge"], name
            assert "devices" not in svc and "group_add" not in svc, name
            assert svc["environment"]["CAMPUSGUARD_GATEWAY_API_KEY_FILE"] == "/run/secrets/camera-key"
            assert not any(k in svc["environment"] for k in ("CAMPUSGUARD_GATEWAY_API_KEY", "CAMPUSGUARD_API_KEYS_FILE"))
            secrets_dir = [v for v in svc["volumes"] if v.startswith("${SECRETS_DIR:?")]
            assert secrets_dir == [f"${{SECRETS_DIR:?run sudo deploy/scripts/init-secrets.sh first}}/cameras:"
                                   "/run/secrets/cameras:ro"], name


def test_the_unconfined_fallback_is_opt_in_and_keeps_the_rest(configs):
    merged = merge_compose(configs["amd"], load_compose(UNCONFINED))
    for name, svc in merged["services"].items():
        unconfined = "seccomp=unconfined" in svc["security_opt"]
        assert unconfined == name.startswith("detector-"), name
        assert "no-new-privileges:true" in svc["security_opt"] and svc["cap_drop"] == ["ALL"], name
    assert "seccomp=unconfined" not in COMPOSE.read_text() + COMPOSE_NVIDIA.read_text()
    assert "docker-compose.seccomp-unconfined.yml" in (DEPLOY.parent / "docs/security.md").read_text()


def test_seccomp_profile_is_dockers_default_plus_numa():
    profile = json.loads(SECCOMP.read_text())
    ours = [r for r in profile["syscalls"] if "CampusGuard" in r.get("comment", "")]
    assert len(ours) == 1
    (rule,) = ours
    assert set(rule["names"]) == NUMA_CALLS and rule["action"] == "SCMP_ACT_ALLOW"
    assert not rule.get("includes") and not rule.get("excludes"), "no CAP_SYS_NICE condition: every capability is dropped"
    assert "deploy/seccomp/README.md" in rule["comment"]
    default = {**profile, "syscalls": [r for r in profile["syscalls"] if r is not rule]}
    digest = hashlib.sha256(json.dumps(default, sort_keys=True).encode()).hexdigest()
    assert digest == DOCKER_DEFAULT_SHA256, "the rest is no longer Docker's default (deploy/seccomp/README.md)"
    # in Docker's default the NUMA calls need CAP_SYS_NICE: that is why the rule exists
    gated = [r for r in default["syscalls"] if NUMA_CALLS <= set(r["names"])]
    assert gated and all(r["includes"].get("caps") == ["CAP_SYS_NICE"] for r in gated)
    assert profile["defaultAction"] == "SCMP_ACT_ERRNO"


def test_no_lifecycle_api_and_a_supported_grafana(configs):
    prom = configs["amd"]["services"]["prometheus"]
    assert not any("lifecycle" in arg for arg in prom["command"])
    assert "enable-lifecycle" not in COMPOSE.read_text()
    major = int(configs["amd"]["services"]["grafana"]["image"].split(":")[1].split(".")[0])
    assert major >= 12, "Grafana 11.x is out of support"


def test_postgres_is_on_an_internal_network_only_the_replicas_join(configs):
    for config in configs.values():
        assert config["networks"]["store"]["internal"] is True
        on_store = {name for name, svc in config["services"].items() if "store" in svc.get("networks", [])}
        assert on_store == {"postgres", *detector_services(config)}
        assert config["services"]["postgres"]["networks"] == ["store"]
        for name, svc in config["services"].items():
            assert svc.get("networks"), f"{name}: joins named networks only (no implicit default)"


def test_every_secret_is_a_file_from_init_secrets(configs):
    for config in configs.values():
        sources = {}
        for name, spec in config["secrets"].items():
            path = spec["file"]
            m = re.fullmatch(r"\$\{SECRETS_DIR:\?([^}]*)\}/(.+)", path)
            assert m and "init-secrets.sh" in m.group(1), (name, path)
            sources[name] = m.group(2)
        assert set(sources.values()) <= FILES
        for name, svc in config["services"].items():
            mounted = {}
            for item in svc.get("secrets", []):
                source, target = (item, item) if isinstance(item, str) else (item["source"], item.get("target", item["source"]))
                mounted[f"/run/secrets/{target}"] = sources[source]
            env = svc.get("environment", {})
            for key, value in env.items():
                assert not re.search(r"(PASSWORD|SECRET|API_KEYS)$", key) or key.endswith("_FILE"), (name, key)
                if key.endswith("_FILE") and str(value).startswith("/run/secrets/"):
                    assert value in mounted, (name, key, value)
            for key in ("POSTGRES_PASSWORD", "GF_SECURITY_ADMIN_PASSWORD", "CAMPUSGUARD_API_KEYS",
                        "CAMPUSGUARD_EVENTS_DB_URL", "CAMPUSGUARD_WEBHOOK_SECRET"):
                assert key not in env, (name, key)
        replica = next(iter(detector_services(config).values()))["environment"]
        assert replica["CAMPUSGUARD_API_KEYS_FILE"] == "/run/secrets/api-keys.yaml"
        assert config["services"]["postgres"]["environment"]["POSTGRES_PASSWORD_FILE"] == "/run/secrets/postgres-password"
        assert config["services"]["grafana"]["environment"]["GF_SECURITY_ADMIN_PASSWORD__FILE"] == \
            "/run/secrets/grafana-admin-password"


def test_env_example_holds_no_secret():
    example = dict(line.split("=", 1) for line in (DEPLOY / ".env.example").read_text().splitlines()
                   if "=" in line and not line.startswith("#"))
    assert example["SECRETS_DIR"] == ""
    for key, value in example.items():
        assert not re.search(r"PASSWORD|SECRET$|API_KEYS$|TOKEN", key), key
    placeholders = re.compile(r"\b(?:change|replace)-?me\b", re.I)
    for path in [DEPLOY.parent / "README.md", *DEPLOY.rglob("*"), *(DEPLOY.parent / "docs").rglob("*.md")]:
        if path.is_file() and path.suffix in {".md", ".yml", ".yaml", ".example", ".sh", ".conf", ".json", ""}:
            assert not placeholders.search(path.read_text(errors="replace")), path
