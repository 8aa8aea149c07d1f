"""The Kubernetes router (deploy/k8s/base/router-*.yaml) under Debian's nginx, for the tests.

The router's nginx.conf and endpoints.sh are taken from the campusguard-router ConfigMap as
shipped, with mechanical substitutions only: /tmp and /etc/campusguard-router move into the
test's folder and `listen 8000` becomes a free loopback port. nginx runs with its master process
(endpoints.sh reloads it with SIGHUP, as in the pod). The headless Service's DNS answer is the
one thing stood in for: a `getent` first on PATH prints the test's pod addresses in glibc's
`getent ahostsv4` format (the real glibc getent is checked in tests/deploy/test_router.py).
Pods are loopback addresses (127.0.0.2, 127.0.0.3, ...) sharing one port, as pods share 8000.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.deploy.conftest import K8S, load_yaml_all, require_tool
from tests.deploy.nginx_util import wait_started
from tests.support.net import free_port

ROUTER_CONFIGMAP = K8S / "base" / "router-configmap.yaml"

GETENT = """#!/bin/sh
# stands in for glibc's `getent ahostsv4 NAME`: one address per line of $ROUTER_TEST_PODS
[ "$1" = ahostsv4 ] && [ -s "$ROUTER_TEST_PODS" ] || exit 2
while read -r address; do
    printf '%-15s STREAM %s\\n%-15s DGRAM  \\n%-15s RAW    \\n' "$address" "$2" "$address" "$address"
done < "$ROUTER_TEST_PODS"
"""


def router_files() -> dict[str, str]:
    (cm,) = load_yaml_all(ROUTER_CONFIGMAP)
    return cm["data"]


def render(text: str, listen: int, tmp: Path) -> str:
    text, n = re.subn(r"listen\s+8000;", f"listen 127.0.0.1:{listen};", text)
    assert n == 1
    text = text.replace("/tmp/", f"{tmp}/").replace("/etc/campusguard-router/", f"{tmp}/")
    text = text.replace("error_log /dev/stderr warn;", f"error_log {tmp}/error.log notice;")
    return text.replace("access_log /dev/stdout;", f"access_log {tmp}/access.log;")


@dataclass
class Router:
    """A running router: nginx and the endpoints loop, and the pods its DNS stand-in answers."""

    nginx: subprocess.Popen
    endpoints: subprocess.Popen
    tmp: Path
    url: str

    def set_pods(self, addresses: list[str]) -> None:
        """What the headless Service answers from now on (the next poll picks it up)."""
        tmp = self.tmp / "pods.new"
        tmp.write_text("".join(f"{a}\n" for a in addresses))
        tmp.replace(self.tmp / "pods.txt")

    def upstreams(self) -> list[str]:
        return re.findall(r"^server\s+(\S+)", (self.tmp / "campusguard/detectors.conf").read_text(), re.M)

    def reloads(self) -> int:
        return self.error_log().count("reconfiguring")

    def wait_reloaded(self, addresses: list[str], since: int, timeout: float = 20) -> None:
        """Until detectors.conf lists ``addresses`` and nginx has reloaded (its workers then use it)."""
        deadline = time.monotonic() + timeout
        want = sorted(addresses)
        while not (sorted(a.rsplit(":", 1)[0] for a in self.upstreams()) == want and self.reloads() > since):
            assert self.nginx.poll() is None and self.endpoints.poll() is None, self.error_log()
            assert time.monotonic() < deadline, (self.upstreams(), self.error_log()[-2000:])
            time.sleep(0.1)
        time.sleep(0.5)  # the old workers finish; new connections meet the new ones

    def error_log(self) -> str:
        path = self.tmp / "error.log"
        return path.read_text(errors="replace") if path.exists() else ""


@contextlib.contextmanager
def running_router(tmp: Path, pods: list[str], pod_port: int) -> Iterator[Router]:
    """The shipped router in front of ``pods`` (addresses, all on ``pod_port``)."""
    nginx = require_tool("nginx", "apt-get install nginx-light")
    files = router_files()
    listen = free_port()
    (tmp / "bin").mkdir(parents=True, exist_ok=True)
    (tmp / "bin/getent").write_text(GETENT)
    (tmp / "bin/getent").chmod(0o755)
    (tmp / "endpoints.sh").write_text(files["endpoints.sh"])
    conf = tmp / "nginx.conf"
    conf.write_text(render(files["nginx.conf"], listen, tmp))
    env = {**os.environ, "PATH": f"{tmp / 'bin'}:{os.environ['PATH']}", "ROUTER_TEST_PODS": str(tmp / "pods.txt"),
           "ROUTER_OUT": str(tmp / "campusguard"), "ROUTER_PID_FILE": str(tmp / "nginx.pid"),
           "ROUTER_DETECTOR_PORT": str(pod_port), "ROUTER_POLL_S": "0.2"}
    router = Router(None, None, tmp, f"http://127.0.0.1:{listen}")  # type: ignore[arg-type]
    router.set_pods(pods)
    # as the nginx container's command: the list first, then nginx
    subprocess.run(["sh", str(tmp / "endpoints.sh"), "--once"], env=env, check=True, capture_output=True)
    user = ["user root root;"] if os.geteuid() == 0 else []  # a root master would run its workers as nobody
    args = [nginx, "-p", str(tmp), "-c", str(conf), "-e", str(tmp / "error.log"), "-g", " ".join(["daemon off;", *user])]
    check = subprocess.run([*args[:-2], "-t"], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    router.nginx = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    router.endpoints = subprocess.Popen(["sh", str(tmp / "endpoints.sh")], env=env, stdout=(tmp / "endpoints.log").open("wb"),
                                        stderr=subprocess.STDOUT)
    try:
        wait_started(router.nginx, f"{router.url}/lb-health", router.error_log)
        # endpoints.sh reloads nginx once at start (as in the pod); a request racing that reload can
        # meet a keep-alive connection the old worker is closing, so the tests begin after it
        deadline = time.monotonic() + 20
        while router.reloads() == 0:
            assert router.nginx.poll() is None and router.endpoints.poll() is None, router.error_log()
            assert time.monotonic() < deadline, router.error_log()[-2000:]
            time.sleep(0.1)
        time.sleep(0.5)  # the old workers finish
        yield router
    finally:
        router.endpoints.terminate()
        router.endpoints.wait(10)
        router.nginx.terminate()
        router.nginx.wait(10)
