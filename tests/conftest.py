"""Shared test fixtures: real data paths (overridable), and a real server in a subprocess.

Data comes from ``../shared`` by default; set CAMPUSGUARD_TEST_WEIGHTS /
CAMPUSGUARD_TEST_DATASET to use other copies. Only their absence skips a test.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest

from tests.support.faults import FaultSwitch
from app.core.logs import quiet_third_party_loggers
from tests.support.logwatch import WATCH, watch_settings
from tests.support.net import free_port
from tests.support.slowwatch import WATCH as SLOW_WATCH

os.environ.setdefault("YOLO_OFFLINE", "1")
# Four workers share two cores, and each starts servers and CLIs with torch's OpenMP threads. By
# default an idle OpenMP thread spins, waiting for the next op: two 2-thread processes on 2 cores
# burnt 2.3-3x the CPU and took 1.7-2x as long as with the threads sleeping, and the suite took
# 9 min 54 s instead of 7 min 44 s (docs/deploy.md, "CPU threads"). Set before torch is first
# imported here; every server and CLI inherits it.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# BACKEND=auto and PRECISION=auto (the defaults) are openvino bf16 on a CPU machine: its IR build and gate would make
# every test that loads a model slower. The suite pins torch fp32, what it was written against, for each Settings()
# and each command it runs that does not choose; tests of auto itself clear them (tests/unit/test_backend_auto.py).
os.environ.setdefault("CAMPUSGUARD_BACKEND", "torch")
os.environ.setdefault("CAMPUSGUARD_PRECISION", "fp32")

REPO = Path(__file__).resolve().parents[1]
WEIGHTS = Path(os.environ.get("CAMPUSGUARD_TEST_WEIGHTS", REPO.parent / "shared/models/yolov8n.pt"))
DATASET = Path(os.environ.get("CAMPUSGUARD_TEST_DATASET", REPO.parent / "shared/datasets/coco-val128"))


SERVER_FIXTURES = {"server_factory", "live_server", "server"}  # fixtures that start `campusguard serve`


# --- no test secret in any log line of the session (tests/support/logwatch.py) -----------------
def pytest_configure(config):
    watch_settings()
    WATCH.install()
    quiet_third_party_loggers()  # as `campusguard serve` does: the session's logs are the service's


def _report_leaks(session, leaks: list[str]) -> None:
    if not leaks:
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    lines = [f"SECRET IN LOGS: {len(leaks)} log line(s) hold a test secret (tests/support/logwatch.py)",
             *(f"  {leak}" for leak in leaks[:50])]
    for line in lines:
        if reporter is not None:
            reporter.write_line(line, red=True)
        else:
            print(line, file=sys.stderr)
    session.exitstatus = pytest.ExitCode.TESTS_FAILED


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """xdist controller: collect what each worker's watch found."""
    node.config._secret_leaks = getattr(node.config, "_secret_leaks", []) + \
        list(getattr(node, "workeroutput", {}).get("secret_leaks", []))


@pytest.hookimpl(tryfirst=True)
def pytest_sessionfinish(session, exitstatus):
    """Every process checks its own logs; a worker hands its findings to the controller."""
    leaks = WATCH.leaks()
    if WATCH.handler not in logging.getLogger().handlers:
        leaks.append("the secret watch's log handler was removed from the root logger: logs went unchecked")
    if hasattr(session.config, "workeroutput"):
        session.config.workeroutput["secret_leaks"] = leaks
        return
    _report_leaks(session, leaks + getattr(session.config, "_secret_leaks", []))


def pytest_runtest_logreport(report):
    """Each phase's time, for the list of slow tests without a marker (tests/support/slowwatch.py).
    With xdist the controller gets every worker's reports; a worker keeps none of its own."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None:
        SLOW_WATCH.record(report)


def pytest_terminal_summary(terminalreporter):
    for line in SLOW_WATCH.lines():
        terminalreporter.write_line(line, yellow=True)


def pytest_collection_modifyitems(config, items):
    """Markers from what a test uses, so `-m "not server"` (and pg, mqtt, browser) select
    by cost without a list to keep in step: the fixtures are the truth."""
    for item in items:
        names = set(getattr(item, "fixturenames", ()))
        params = getattr(getattr(item, "callspec", None), "params", {})
        if names & {"postgres", "pg_url"} or params.get("db_url") == "postgresql":
            item.add_marker(pytest.mark.pg)
        if "mosquitto" in names:
            item.add_marker(pytest.mark.mqtt)
        if names & SERVER_FIXTURES:
            item.add_marker(pytest.mark.server)
        if "browser" in names:
            item.add_marker(pytest.mark.browser)
            item.add_marker(pytest.mark.server)
    items[:] = heaviest_files_first(items)


# What a test costs, from its markers and fixtures: xdist hands whole files to workers in this
# order (`make test`: --dist loadfile --no-loadscope-reorder), so files with real servers, the
# model over many images or a browser start first and the cheap unit files fill the gaps at the
# end, instead of a two-minute file starting last and running alone (longest first).
COST = {"slow": 3, "browser": 3, "streams": 2, "server": 2, "pg": 2, "timeout": 2, "mqtt": 1}


def heaviest_files_first(items: list) -> list:
    files: dict[str, list] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::")[0], []).append(item)

    def cost(group: list) -> float:
        each = [sum(COST.get(name, 0) for name in {m.name for m in item.iter_markers()})
                + ("weights" in getattr(item, "fixturenames", ())) for item in group]
        return max(each) + 0.01 * len(group)

    order = sorted(files.values(), key=cost, reverse=True)  # stable: ties keep the collection order
    return [item for group in order for item in group]


def ultralytics_asset(name: str) -> Path:
    import ultralytics

    return Path(ultralytics.__file__).parent / "assets" / name


@pytest.fixture(scope="session")
def weights() -> Path:
    if not WEIGHTS.is_file():
        pytest.skip(f"model weights not found at {WEIGHTS} (set CAMPUSGUARD_TEST_WEIGHTS)")
    return WEIGHTS


@pytest.fixture(scope="session")
def dataset() -> Path:
    if not (DATASET / "data.yaml").is_file():
        pytest.skip(f"dataset not found at {DATASET} (set CAMPUSGUARD_TEST_DATASET)")
    return DATASET


@pytest.fixture(scope="session")
def bus_jpg() -> bytes:
    return ultralytics_asset("bus.jpg").read_bytes()


@pytest.fixture(scope="session")
def zidane_jpg() -> bytes:
    return ultralytics_asset("zidane.jpg").read_bytes()


@pytest.fixture(scope="session")
def onnx_cache(tmp_path_factory) -> Path:
    """One ONNX export cache for the whole session (exporting takes seconds)."""
    return tmp_path_factory.mktemp("onnx-cache")


@pytest.fixture(scope="session")
def openvino_cache(tmp_path_factory) -> Path:
    """One model cache for every OpenVINO test of the session: each IR (weights, shape,
    precision, calibration frames) is built once."""
    return tmp_path_factory.mktemp("openvino-cache")


@dataclass
class LiveServer:
    """A real `campusguard serve` process on a free loopback port."""

    proc: subprocess.Popen
    url: str
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)

    def client(self, **kwargs) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=kwargs.pop("timeout", 60.0), **kwargs)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    @property
    def auth_headers(self) -> dict[str, str]:
        keys = self.env.get("CAMPUSGUARD_API_KEYS", "")
        return {"x-api-key": keys.split(",")[0].strip()} if keys.strip() else {}

    def wait_ready(self, timeout: float = 180.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited with {self.proc.returncode}:\n{self.log()[-4000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.url}/health/ready", headers=self.auth_headers, timeout=2).status_code == 200:
                    return
            time.sleep(0.2)
        raise TimeoutError(f"server not ready after {timeout}s:\n{self.log()[-4000:]}")

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


# Test servers start without warm-up and at imgsz 320: a test about accuracy or the
# warm-up itself says so (imgsz=640, warmup_iters=2).
SERVER_DEFAULTS = {"backend": "torch", "precision": "fp32", "imgsz": 320, "warmup_iters": 0, "threads": 2}  # or auto


def start_server(tmp_path: Path, weights: Path, wait: bool = True, faults: FaultSwitch | None = None,
                 python_path: Path | None = None, **settings) -> LiveServer:
    """Start the service with ``CAMPUSGUARD_<KEY>=value`` for each keyword setting (over
    ``SERVER_DEFAULTS``), on ``weights`` (the test's fixture, never a path relative to the cwd).
    ``python_path`` goes first on the server's PYTHONPATH (a test's stand-in for a broken package).

    With ``faults`` the backend is wrapped in a fault injector through the backend registry
    (``tests.support.serve_with_faults``), switched through that control file; otherwise it is
    exactly ``campusguard serve``.
    """
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAMPUSGUARD_")}
    # no CAMPUSGUARD_HOST: the default (127.0.0.1) is what `make run` gets, so every server test starts like it
    env.update({"CAMPUSGUARD_WEIGHTS": str(Path(weights).resolve()),
                "CAMPUSGUARD_PORT": str(port),
                "CAMPUSGUARD_ONNX_CACHE_DIR": str(tmp_path / "onnx-cache"), "PYTHONUNBUFFERED": "1"})
    env.update({f"CAMPUSGUARD_{k.upper()}": str(v) for k, v in {**SERVER_DEFAULTS, **settings}.items()})
    if faults is not None:
        env.update(faults.env())
    if python_path is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(python_path), env.get("PYTHONPATH", "")]))
    entry = "tests.support.serve_with_faults" if faults is not None else "app.cli"
    log_path = tmp_path / f"server-{port}.log"
    WATCH.learn_environment(env)
    WATCH.watch_file(log_path)
    log = log_path.open("wb")
    proc = subprocess.Popen([sys.executable, "-m", entry, "serve"], cwd=REPO, env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    server = LiveServer(proc, f"http://127.0.0.1:{port}", log_path, env)
    if wait:
        try:
            server.wait_ready()
        except Exception:
            server.stop(signal.SIGKILL)
            raise
    return server


@pytest.fixture
def server_factory(tmp_path, weights):
    """Start servers with custom settings; all are stopped at the end of the test."""
    started: list[LiveServer] = []

    def factory(wait: bool = True, faults: FaultSwitch | None = None, **settings) -> LiveServer:
        server = start_server(tmp_path, weights, wait=wait, faults=faults, **settings)
        started.append(server)
        return server

    yield factory
    for server in started:
        server.stop(signal.SIGKILL if server.proc.poll() is None else signal.SIGTERM, timeout=10)


@pytest.fixture(scope="module")
def live_server(tmp_path_factory, weights):
    """The default service (torch backend, yolov8n) at the test defaults, shared by a test module."""
    server = start_server(tmp_path_factory.mktemp("live"), weights)
    yield server
    server.stop()


def require_system_package(found, what: str, package: str):
    """``found``, or skip when it is missing and we cannot install it (not root); as root
    (CI) a missing package is a failure: `make system-deps` installs it."""
    if found is None:
        if os.geteuid() != 0:
            pytest.skip(f"{what} not installed (apt-get install {package})")
        pytest.fail(f"{what} not installed: run `make system-deps`")
    return found


@pytest.fixture(scope="session")
def postgres():
    """A real PostgreSQL cluster for the session (app/tooling/pgcluster.py). Skipped only when the server is
    not installed and we cannot install it (not root); CI installs it (`make system-deps`)."""
    from app.tooling.pgcluster import PostgresCluster, find_bin_dir

    bin_dir = require_system_package(find_bin_dir(), "PostgreSQL server", "postgresql")
    cluster = PostgresCluster(bin_dir, free_port()).start()
    yield cluster
    cluster.stop()


@pytest.fixture
def mosquitto():
    """A real Mosquitto broker on a free loopback port (tests/support/mqtt_broker.py), stopped at the
    end. Skipped only when it is not installed and we cannot install it (not root)."""
    from tests.support.mqtt_broker import Mosquitto, find_mosquitto

    binary = require_system_package(find_mosquitto(), "mosquitto", "mosquitto")
    broker = Mosquitto(binary, free_port()).start()
    yield broker
    broker.close()


@pytest.fixture
def pg_url(postgres) -> str:
    """SQLAlchemy URL of a fresh, empty PostgreSQL database."""
    return postgres.new_database()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path) -> str:
    """An empty event-store database: a SQLite file, then a PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/sub/events.db"
    return request.getfixturevalue("pg_url")
