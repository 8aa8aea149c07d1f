"""deploy/docker-compose.yml (+ the NVIDIA override) and the nginx load balancer.

The files validate against the Compose specification's JSON schema; one detector per GPU
with only that GPU's device nodes (AMD) or device id (NVIDIA); health checks, restart
policies and depends_on conditions; every replica is behind nginx and a Prometheus target.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess

import jsonschema
import pytest

from tests.deploy.conftest import (
    COMPOSE, COMPOSE_NVIDIA, COMPOSE_SCHEMA, DEPLOY, NGINX_CONF, PROMETHEUS_CONFIG, detector_services,
    for_schema, load_compose, load_yaml, merge_compose,
)

KFD = "/dev/kfd"
RENDER = re.compile(r"^/dev/dri/renderD\$\{GPU(\d+)_RENDER_MINOR:-(\d+)\}$")


@pytest.fixture(scope="module")
def base() -> dict:
    return load_compose(COMPOSE)


@pytest.fixture(scope="module")
def nvidia() -> dict:
    return load_compose(COMPOSE_NVIDIA)


@pytest.fixture(scope="module")
def merged(base, nvidia) -> dict:
    return merge_compose(base, nvidia)


def size_bytes(value: str | int) -> int:
    if isinstance(value, int):
        return value
    m = re.fullmatch(r"(\d+)([kmg]?)b?", value.lower())
    assert m, value
    return int(m.group(1)) * {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}[m.group(2)]


@pytest.mark.parametrize("path", [COMPOSE, COMPOSE_NVIDIA], ids=lambda p: p.name)
def test_validates_against_compose_spec(path):
    if not COMPOSE_SCHEMA.is_file():
        pytest.skip(f"Compose schema not found at {COMPOSE_SCHEMA} (set CAMPUSGUARD_TEST_COMPOSE_SCHEMA)")
    schema = json.loads(COMPOSE_SCHEMA.read_text())
    validator_cls = jsonschema.validators.validator_for(schema)
    validator_cls.check_schema(schema)
    errors = sorted(validator_cls(schema).iter_errors(for_schema(load_compose(path))), key=lambda e: e.path)
    assert not errors, "\n".join(f"{'/'.join(map(str, e.path))}: {e.message}" for e in errors)


def test_merged_nvidia_config_also_validates(merged):
    if not COMPOSE_SCHEMA.is_file():
        pytest.skip(f"Compose schema not found at {COMPOSE_SCHEMA}")
    schema = json.loads(COMPOSE_SCHEMA.read_text())
    jsonschema.validators.validator_for(schema)(schema).validate(merged)


def test_one_detector_per_gpu_amd(base):
    detectors = detector_services(base)
    assert sorted(detectors, key=lambda n: int(n.split("-")[1])) == [f"detector-{i}" for i in range(len(detectors))]
    assert len(detectors) == 8, "one replica per MI300X GPU (8 per node)"
    minors = []
    for name, svc in detectors.items():
        gpu = int(name.split("-")[1])
        devices = svc["devices"]
        assert KFD in devices, name
        renders = [d for d in devices if "/dev/dri" in d]
        assert len(renders) == 1, f"{name} must map exactly one render node, got {renders}"
        m = RENDER.match(renders[0])
        assert m and int(m.group(1)) == gpu, f"{name}: {renders[0]}"
        minors.append(int(m.group(2)))
        assert "/dev/dri" not in devices and not any(d.startswith("/dev/dri/card") for d in devices)
        assert set(devices) == {KFD, renders[0]}
        assert "video" in svc["group_add"]
        assert any(str(g).startswith("${RENDER_GID") for g in svc["group_add"]), "host render group id"
        assert "seccomp=${SECCOMP_PROFILE:-./seccomp/rocm-numa.json}" in svc["security_opt"]  # test_hardening.py
        assert size_bytes(svc["shm_size"]) >= 1 << 30
        env = svc["environment"]
        assert env["CAMPUSGUARD_DEVICE"] == "cuda:0", "the container sees only its GPU"
        assert env["CAMPUSGUARD_ONNX_CACHE_DIR"].endswith(f"/{name}"), "per-replica compile cache"
        assert any(v.endswith(":/models:ro") for v in svc["volumes"])
    assert minors == list(range(128, 128 + len(detectors))), "distinct default render nodes"


def test_one_detector_per_gpu_nvidia(base, nvidia, merged):
    assert set(detector_services(nvidia)) == set(detector_services(base))
    assert set(nvidia["services"]) <= set(base["services"]), "the override only changes existing services"
    ids = []
    for name, svc in detector_services(merged).items():
        assert "devices" not in svc and "group_add" not in svc, name
        assert svc["security_opt"] == base["services"][name]["security_opt"], "the hardening stays"
        assert "MIOPEN_USER_DB_PATH" not in svc["environment"]
        assert svc["environment"]["CAMPUSGUARD_DEVICE"] == "cuda:0"
        (reservation,) = svc["deploy"]["resources"]["reservations"]["devices"]
        assert reservation["driver"] == "nvidia" and reservation["capabilities"] == ["gpu"]
        assert reservation["device_ids"] == [name.split("-")[1]], name
        ids += reservation["device_ids"]
        assert "cuda" in svc["image"]
    assert len(ids) == len(set(ids))


def test_every_service_has_restart_and_healthcheck(base, merged):
    for config in (base, merged):
        for name, svc in config["services"].items():
            assert svc.get("restart") in {"unless-stopped", "always"}, name
            test = svc["healthcheck"]["test"]
            assert test[0] == "CMD" and len(test) > 1, name
            assert {"interval", "timeout", "retries"} <= set(svc["healthcheck"]), name
    for name, svc in detector_services(base).items():
        hc = svc["healthcheck"]
        assert any("/health/ready" in part for part in hc["test"]), name
        assert int(hc["start_period"].rstrip("s")) >= 60, "model load and warm-up"
        assert int(svc["stop_grace_period"].rstrip("s")) > 30, "longer than the drain timeout"


def test_images_are_pinned_official(base):
    images = {name: svc["image"] for name, svc in base["services"].items()
              if not name.startswith(("detector-", "gateway-"))}  # ours: built from the Dockerfiles
    assert images["lb"].startswith("nginx:") or images["lb"].startswith("haproxy:")
    assert images["prometheus"].startswith("prom/prometheus:v")
    assert images["grafana"].startswith("grafana/grafana:")
    for name, image in images.items():
        tag = image.partition(":")[2]
        assert tag and tag != "latest" and re.match(r"v?\d+\.\d+", tag), f"{name}: {image}"


def test_depends_on_conditions(base):
    services = base["services"]
    lb_deps = services["lb"]["depends_on"]
    assert set(lb_deps) == set(detector_services(base))
    assert all(dep["condition"] in {"service_started", "service_healthy"} for dep in lb_deps.values())
    assert services["grafana"]["depends_on"]["prometheus"]["condition"] == "service_healthy"


def test_load_balancer_config(base):
    conf = NGINX_CONF.read_text()
    lb = base["services"]["lb"]
    assert "./nginx/nginx.conf:/etc/nginx/nginx.conf:ro" in lb["volumes"]
    assert (DEPLOY / "nginx/nginx.conf").is_file()
    upstream = re.search(r"upstream\s+(\w+)\s*\{(.*?)\}", conf, re.S)
    servers = re.findall(r"^\s*server\s+([\w.-]+):(\d+)", upstream.group(2), re.M)
    detectors = detector_services(base)
    assert sorted(f"{h}:{p}" for h, p in servers) == sorted(f"{n}:8000" for n in detectors)
    # consistent hashing on camera_id, random spread without one
    key = re.search(r"hash\s+\$(\w+)\s+consistent;", upstream.group(2)).group(1)
    # the key is the camera of the path (/cameras/{id}...) or of ?camera_id=, else $request_id
    mapping = re.search(r"map\s+\"([^\"]*)\"\s+\$" + key + r"\s*\{(.*?)\n\s*\}", conf, re.S)
    assert "$arg_camera_id" in mapping.group(1)
    assert re.search(r"default\s+\$request_id;", mapping.group(2))
    path_var = re.search(r"\$(\w+)/\$arg_camera_id", mapping.group(1)).group(1)
    assert re.search(r"map\s+\$uri\s+\$" + path_var + r"\s*\{[^}]*cameras", conf, re.S)
    # retry a replica answering 503 (POST too) on the next one
    nxt = re.search(r"proxy_next_upstream\s+([^;]+);", conf).group(1).split()
    assert {"error", "timeout", "http_503", "non_idempotent"} <= set(nxt)
    assert int(re.search(r"proxy_next_upstream_tries\s+(\d+);", conf).group(1)) >= 2
    assert re.search(r"proxy_pass\s+http://" + upstream.group(1) + ";", conf)
    assert re.search(r"client_max_body_size\s+(\d+)m;", conf) and int(re.search(r"client_max_body_size\s+(\d+)m;", conf).group(1)) >= 20
    assert "proxy_request_buffering on;" in conf
    port = re.search(r"listen\s+(\d+);", conf).group(1)
    assert any(p.endswith(f":{port}") for p in lb["ports"])
    assert f"127.0.0.1:{port}/lb-health" in " ".join(lb["healthcheck"]["test"])


def test_every_replica_is_a_scrape_target(base):
    prom = base["services"]["prometheus"]
    assert "./prometheus:/etc/prometheus:ro" in prom["volumes"]
    assert "--config.file=/etc/prometheus/prometheus.yml" in prom["command"]
    config = load_yaml(PROMETHEUS_CONFIG)
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "campusguard"]
    targets = [t for sc in job["static_configs"] for t in sc["targets"]]
    expected = [f"{name}:{svc['environment']['CAMPUSGUARD_PORT']}" for name, svc in detector_services(base).items()]
    assert sorted(targets) == sorted(expected)
    assert job.get("metrics_path", "/metrics") == "/metrics"


def test_grafana_provisioning_mounted(base):
    grafana = base["services"]["grafana"]
    assert "./grafana/provisioning:/etc/grafana/provisioning:ro" in grafana["volumes"]
    dash_mount = next(v for v in grafana["volumes"] if v.startswith("./grafana/dashboards:"))
    target = dash_mount.split(":")[1]
    provider = load_yaml(DEPLOY / "grafana/provisioning/dashboards/campusguard.yml")["providers"][0]
    assert provider["options"]["path"] == target
    assert grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"] == f"{target}/campusguard.json"
    ds = load_yaml(DEPLOY / "grafana/provisioning/datasources/prometheus.yml")["datasources"][0]
    assert ds["url"] == "http://prometheus:9090"


def test_env_example_covers_variables(base, nvidia):
    text = COMPOSE.read_text() + COMPOSE_NVIDIA.read_text()
    required = set(re.findall(r"\$\{(\w+):\?", text))
    example = {l.split("=", 1)[0] for l in (DEPLOY / ".env.example").read_text().splitlines()
               if "=" in l and not l.startswith("#")}
    assert required <= example, f"required variables missing from .env.example: {required - example}"
    # every CAMPUSGUARD_* setting passed to the replicas is a real setting of the service
    from app.config import Settings

    for svc in detector_services(base).values():
        for key in svc["environment"]:
            if key.startswith("CAMPUSGUARD_"):
                assert key[len("CAMPUSGUARD_"):].lower() in Settings.model_fields, key


def test_gpu_env_script(tmp_path):
    """deploy/scripts/gpu-env.sh reads the KFD topology (HIP's GPU order) and the render gid."""
    nodes = tmp_path / "class/kfd/kfd/topology/nodes"
    layout = {0: (0, None), 1: (0, None), 2: (51227, 136), 3: (4321, 128), 10: (777, 144)}  # CPUs have gpu_id 0
    for node, (gpu_id, minor) in layout.items():
        d = nodes / str(node)
        d.mkdir(parents=True)
        (d / "gpu_id").write_text(f"{gpu_id}\n")
        props = "cpu_cores_count 96\nsimd_count 0\n" if minor is None else f"simd_count 1216\ndrm_render_minor {minor}\n"
        (d / "properties").write_text(props)
    group = tmp_path / "group"
    group.write_text("root:x:0:\nvideo:x:44:\nrender:x:992:\n")
    env = {**os.environ, "SYSFS_ROOT": str(tmp_path), "GROUP_FILE": str(group)}
    out = subprocess.run(["sh", str(DEPLOY / "scripts/gpu-env.sh")], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == ["GPU0_RENDER_MINOR=136", "GPU1_RENDER_MINOR=128", "GPU2_RENDER_MINOR=144",
                                       "RENDER_GID=992"]
    # a host without AMD GPUs fails loudly
    empty = tmp_path / "empty"
    (empty / "class/kfd/kfd/topology/nodes/0").mkdir(parents=True)
    (empty / "class/kfd/kfd/topology/nodes/0/gpu_id").write_text("0\n")
    bad = subprocess.run(["sh", str(DEPLOY / "scripts/gpu-env.sh")], env={**env, "SYSFS_ROOT": str(empty)},
                         capture_output=True, text=True)
    assert bad.returncode != 0 and "no AMD GPU" in bad.stderr


def interpolate(value: str, env: dict[str, str]) -> str:
    """Compose's ${VAR:-default} / ${VAR:?error} / ${VAR} for the tests (env wins, then the default)."""
    def sub(m: re.Match) -> str:
        name, op, arg = m.group(1), m.group(2), m.group(3) or ""
        if name in env:
            return env[name]
        assert op != ":?", f"{name} is required: {arg}"
        return arg if op == ":-" else ""
    return re.sub(r"\$\{(\w+)(:[-?])?([^}]*)\}", sub, value)


def test_shared_postgres_event_store(base, merged):
    pg = base["services"]["postgres"]
    assert re.fullmatch(r"postgres:\d+\.\d+(-alpine)?", pg["image"]), "the official image, pinned"
    assert "ports" not in pg, "only the replicas reach the database"
    assert "postgres-data:/var/lib/postgresql/data" in pg["volumes"] and "postgres-data" in base["volumes"]
    assert pg["healthcheck"]["test"][:2] == ["CMD", "pg_isready"]
    env = pg["environment"]
    assert env["POSTGRES_PASSWORD_FILE"] == "/run/secrets/postgres-password", "the password is a secret file"
    example = dict(l.split("=", 1) for l in (DEPLOY / ".env.example").read_text().splitlines()
                   if "=" in l and not l.startswith("#"))
    dotenv = {**example, "SITE_FILE": "./site.example.yaml"}
    from app.rules.site.loader import load_site_config

    for config in (base, merged):
        for name, svc in detector_services(config).items():
            assert svc["depends_on"]["postgres"]["condition"] == "service_healthy", name
            senv = svc["environment"]
            # the URL (with the password) is the events-db-url file; init-secrets.sh writes it from the
            # same user, database and host: tests/deploy/test_secrets.py
            assert senv["CAMPUSGUARD_EVENTS_DB_URL_FILE"] == "/run/secrets/events-db-url", name
            assert "events-db-url" in svc["secrets"] and "postgres-password" in pg["secrets"]
            assert (interpolate(env["POSTGRES_USER"], dotenv), interpolate(env["POSTGRES_DB"], dotenv)) == \
                ("campusguard", "campusguard"), "the names init-secrets.sh puts in the URL by default"
            mounts = [interpolate(v, dotenv).split(":") for v in svc["volumes"]]
            site_mounts = [m for m in mounts if m[1] == senv["CAMPUSGUARD_SITE_CONFIG"]]
            assert len(site_mounts) == 1 and site_mounts[0][2:] == ["ro"], f"{name}: site file mounted read-only"
            host_file = DEPLOY / site_mounts[0][0]
            assert load_site_config(host_file).cameras, "the default site file exists and is valid"
            assert senv["CAMPUSGUARD_SNAPSHOT_DIR"].startswith("/var/cache/campusguard/")
            assert any(v.endswith(":/var/cache/campusguard") and v.startswith("detector-cache:") for v in svc["volumes"])


def test_render_gid_is_required_not_guessed(base):
    """No fallback to a `render` group name the image may lack: compose stops with a message."""
    for svc in detector_services(base).values():
        gids = [g for g in svc["group_add"] if "RENDER_GID" in str(g)]
        assert len(gids) == 1 and gids[0].startswith("${RENDER_GID:?") and "gpu-env.sh" in gids[0]
    example = (DEPLOY / ".env.example").read_text().splitlines()
    assert "RENDER_GID=" in example  # empty until gpu-env.sh fills it: compose refuses to start


def test_each_replica_bounds_its_cpu_threads(base):
    """Eight replicas with threads=0 would each spin every core."""
    for svc in detector_services(base).values():
        threads = svc["environment"]["CAMPUSGUARD_THREADS"]
        default = int(re.fullmatch(r"\$\{CAMPUSGUARD_THREADS:-(\d+)\}", threads).group(1))
        assert 1 <= default and default * len(detector_services(base)) <= 64


def test_camera_gateway(base, merged):
    """Issue #24: a gateway pulls the cameras' streams and POSTs through nginx with a camera key;
    the replicas' ingest is off, so no camera is pulled twice; the NVIDIA node runs its image.
    Issue #31: the key and the camera passwords are files from init-secrets.sh (its hardening:
    tests/deploy/test_hardening.py)."""
    from app.ingest.gateway import configure

    gateways = {name: svc for name, svc in base["services"].items() if name.startswith("gateway-")}
    assert gateways, "no gateway service"
    shards = set()
    for name, svc in gateways.items():
        assert svc["entrypoint"] == ["campusguard", "gateway"]
        parser = argparse.ArgumentParser()
        configure(parser)
        args = parser.parse_args(svc["command"])  # the command line the gateway really accepts
        # nginx's port for this network (8080 only redirects to HTTPS)
        assert args.service == "http://lb:8000" and args.gateway_id == name
        assert f":{args.site}:ro" in " ".join(svc["volumes"]), "the site file is mounted where --site reads it"
        shards.add(args.shard)
        # the camera key as a Docker secret (the `camera` line of api-keys.yaml), never a value
        assert svc["environment"] == {"CAMPUSGUARD_GATEWAY_API_KEY_FILE": "/run/secrets/camera-key"}
        assert svc["secrets"] == ["camera-key"] and base["secrets"]["camera-key"]["file"].endswith("}/camera-key")
        # the camera passwords: SECRETS_DIR/cameras, read-only, where --secrets-dir reads them
        assert f"${{SECRETS_DIR:?run sudo deploy/scripts/init-secrets.sh first}}/cameras:{args.secrets_dir}:ro" \
            in svc["volumes"]
        assert svc["depends_on"]["lb"]["condition"] == "service_healthy"
        assert str(args.heartbeat_file) in " ".join(svc["healthcheck"]["test"])
        assert "CUDA_IMAGE" in merged["services"][name]["image"] and "CUDA" not in svc["image"]
    n = len(gateways)
    assert shards == {f"{i}/{n}" for i in range(n)}, "each camera pulled by exactly one gateway"
    for name, svc in detector_services(base).items():
        assert svc["environment"]["CAMPUSGUARD_INGEST"] == "off", name


def networks_of(svc: dict) -> set[str]:
    """The networks a service joins (a list, or a mapping with per-network options)."""
    return set(svc.get("networks") or ())


def test_only_nginx_names_the_client_and_only_nginx_reaches_the_replicas(base, merged):
    """Issue 42, finding 4: with `*` any container on the replicas' network (the gateways,
    Prometheus, Grafana, the Docker host) chose the address the failed-key throttle and the
    audit trail see. The replicas believe X-Forwarded-For only from nginx's fixed address on an
    internal network only nginx and the replicas join; the rest still reach what they need."""
    import ipaddress

    example = dict(line.split("=", 1) for line in (DEPLOY / ".env.example").read_text().splitlines()
                   if "=" in line and not line.startswith("#"))
    for config in (base, merged):
        services, nets = config["services"], config["networks"]
        detectors = detector_services(config)
        lb = services["lb"]
        fixed = interpolate(lb["networks"]["replicas"]["ipv4_address"], {})
        (ipam,) = nets["replicas"]["ipam"]["config"]
        subnet, dynamic = interpolate(ipam["subnet"], {}), interpolate(ipam["ip_range"], {})
        # nginx's address is in the subnet but not where the replicas' addresses come from (they
        # start first: one would take it, and nginx would not start)
        assert ipaddress.ip_network(dynamic).subnet_of(ipaddress.ip_network(subnet))
        assert ipaddress.ip_address(fixed) in ipaddress.ip_network(subnet)
        assert ipaddress.ip_address(fixed) not in ipaddress.ip_network(dynamic)
        assert (example["LB_REPLICAS_IP"], example["REPLICAS_SUBNET"], example["REPLICAS_IP_RANGE"]) == \
            (fixed, subnet, dynamic), "the documented defaults"
        for name, svc in detectors.items():
            trusted = interpolate(str(svc["environment"]["CAMPUSGUARD_FORWARDED_ALLOW_IPS"]), {})
            assert trusted == fixed, f"{name}: trusts {trusted!r}, not nginx's address"
            # the variable, not a copy of its default: LB_REPLICAS_IP moves both
            assert interpolate(str(svc["environment"]["CAMPUSGUARD_FORWARDED_ALLOW_IPS"]),
                               {"LB_REPLICAS_IP": "192.0.2.9"}) == "192.0.2.9"
            assert "edge" not in networks_of(svc), f"{name}: on the network of the gateways and Grafana"
        members = {net: {n for n, s in services.items() if net in networks_of(s)} for net in nets}
        assert nets["replicas"]["internal"] is True and members["replicas"] == {"lb", *detectors}
        assert nets["metrics"]["internal"] is True and members["metrics"] == {"prometheus", *detectors}
        assert members["egress"] == set(detectors), "the replicas' way out (webhooks, MQTT) is theirs alone"
        # every replica is reached by nginx and Prometheus; the gateways reach nginx, Grafana Prometheus
        for name in detectors:
            assert networks_of(services[name]) & networks_of(lb) == {"replicas"}, name
            assert networks_of(services[name]) & networks_of(services["prometheus"]) == {"metrics"}, name
        for name, svc in services.items():
            if name.startswith("gateway-"):
                assert "edge" in networks_of(svc) & networks_of(lb), name
        assert networks_of(services["grafana"]) & networks_of(services["prometheus"])
