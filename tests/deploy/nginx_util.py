"""The shipped nginx config under Debian's nginx, for the tests: rendered, started, stopped.

deploy/nginx/nginx.conf runs as shipped after mechanical substitutions only: the replica names
become loopback ports (stand-ins or a real `campusguard serve`), the `resolve` parameter and
Docker's resolver are dropped (Debian's nginx 1.22 predates `resolve`; the compose image
nginx:1.28 has it), the three listen ports become free loopback ports, and /tmp and
/run/secrets move into the test's folder. The includes that deploy/nginx/campusguard-env.sh
writes at container start are written by that script, and the certificate by
deploy/scripts/self-signed-cert.sh.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.deploy.conftest import DEPLOY, NGINX_CONF, require_tool
from tests.deploy.secrets_util import as_me
from tests.support.net import free_port

REPLICAS = 8


@dataclass
class Edge:
    """A running nginx with the shipped config: plain (the compose network's port), HTTPS, and
    the HTTP port that redirects."""

    proc: subprocess.Popen
    tmp: Path
    internal: str
    https: str
    http: str
    https_port: int
    ca: Path

    def error_log(self) -> str:
        return (self.tmp / "error.log").read_text(errors="replace")

    def body_temp_files(self) -> list[Path]:
        return [p for p in (self.tmp / "client_body").rglob("*") if p.is_file()]


def render(text: str, upstream_ports: list[int], ports: dict[str, int], tmp: Path) -> str:
    servers = set(re.findall(r"server\s+(detector-(\d+)):8000", text))
    assert len(servers) == REPLICAS
    for name, index in servers:
        text = re.sub(rf"server\s+{name}:8000\s+resolve\b", f"server 127.0.0.1:{upstream_ports[int(index)]}", text)
    assert not re.search(r"\sresolve\b", text), "a replica line kept `resolve`"
    text = re.sub(r"^\s*resolver\s+[^;]+;", "", text, flags=re.M)
    for shipped, mine in (("8080", ports["http"]), ("8443 ssl", f"{ports['https']} ssl"), ("8000", ports["internal"])):
        text, n = re.subn(rf"listen\s+{shipped};", f"listen 127.0.0.1:{mine};", text)
        assert n == 1, shipped
    text = text.replace("/tmp/", f"{tmp}/").replace("/run/secrets/", f"{tmp}/secrets/")
    text = text.replace("error_log /dev/stderr warn;", f"error_log {tmp}/error.log warn;")
    return text.replace("access_log /dev/stdout;", f"access_log {tmp}/access.log;")


def make_certificate(tmp: Path) -> Path:
    """deploy/scripts/self-signed-cert.sh into tmp/secrets (kept if already there; the test's user owns it)."""
    env = {**os.environ, **as_me(), "SECRETS_DIR": str(tmp / "secrets")}
    subprocess.run(["sh", str(DEPLOY / "scripts/self-signed-cert.sh"), "localhost"], env=env, check=True,
                   capture_output=True, text=True)
    return tmp / "secrets" / "tls.crt"


def wait_started(proc: subprocess.Popen, health_url: str, error_log: Callable[[], str], timeout: float = 20) -> None:
    """Until nginx answers its /lb-health (its error log if it exits first)."""
    deadline = time.monotonic() + timeout
    while True:
        assert proc.poll() is None, error_log()
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(health_url, timeout=1).status_code == 200:
                return
        assert time.monotonic() < deadline, "nginx did not start"
        time.sleep(0.1)


@contextlib.contextmanager
def running_edge(tmp: Path, upstream_ports: list[int], **lb_env: str) -> Iterator[Edge]:
    """nginx with the shipped config in front of ``upstream_ports`` (one per replica line)."""
    nginx = require_tool("nginx", "apt-get install nginx-light")
    ports = {"http": free_port(), "https": free_port(), "internal": free_port()}
    ca = make_certificate(tmp)
    env = {**os.environ, "OUT": str(tmp / "campusguard"), "LB_HTTPS_PORT": str(ports["https"]), **lb_env}
    subprocess.run(["sh", str(DEPLOY / "nginx/campusguard-env.sh")], env=env, check=True, capture_output=True)
    conf = tmp / "nginx.conf"
    conf.write_text(render(NGINX_CONF.read_text(), upstream_ports, ports, tmp))
    args = [nginx, "-p", str(tmp), "-c", str(conf), "-e", str(tmp / "error.log"), "-g", "daemon off; master_process off;"]
    check = subprocess.run([*args[:-2], "-t"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    edge = Edge(proc, tmp, f"http://127.0.0.1:{ports['internal']}", f"https://localhost:{ports['https']}",
                f"http://127.0.0.1:{ports['http']}", ports["https"], ca)
    try:
        wait_started(proc, f"{edge.http}/lb-health", edge.error_log)
        yield edge
    finally:
        proc.terminate()
        proc.wait(10)
