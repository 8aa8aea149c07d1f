"""The production app in-process with a site file and a real rules service (console tests)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import yaml

from app.config import Settings
from app.core.metrics import Metrics
from app.rules.service.facade import RulesService
from app.wiring import build_rules
from tests.support.inprocess import IMGSZ, InProcess, inprocess_app
from tests.support.rules_util import EXAMPLE_SITE

AREAS = ("north-gate", "library", "car-park", "sports-hall", "dorms")


def write_big_site(path: Path, n: int) -> list[str]:
    """A site file of ``n`` cameras spread over five areas, each with a restricted zone and an
    intrusion rule (as a real campus has); every sixth camera has no area. Returns the ids."""
    cams = []
    for i in range(n):
        cam = {"id": f"cam-{i:03d}", "name": f"Camera {i:03d}",
               "zones": [{"name": "entry", "kind": "restricted",
                          "polygon": [[0.1, 0.5], [0.9, 0.5], [0.9, 0.95], [0.1, 0.95]],
                          "rules": [{"type": "intrusion", "classes": ["person"]}]}]}
        if i % 6 != 5:
            cam["area"] = AREAS[i % len(AREAS)]
        cams.append(cam)
    path.write_text(yaml.safe_dump({"version": 1, "site": f"{n} cameras", "cameras": cams}, sort_keys=False))
    return [c["id"] for c in cams]


@contextmanager
def site_app(tmp: Path, site_file: Path = EXAMPLE_SITE, **settings) -> Iterator[InProcess]:
    """``ip.rules`` is the rules service, ``ip.site`` the copy of the site file it uses (the
    example one unless ``site_file`` names another)."""
    site = tmp / "site.yaml"
    if Path(site_file) != site:
        shutil.copy(site_file, site)
    settings.setdefault("events_db_url", f"sqlite:///{tmp}/e.db")  # or another store (PostgreSQL)
    s = Settings(imgsz=IMGSZ, threads=1, preprocess_workers=1, warmup_iters=0, site_config=site,
                 snapshot_dir=tmp / "snaps", clips=False, **settings)
    built: list[RulesService] = []

    def rules_on(metrics: Metrics) -> RulesService:
        built.append(build_rules(s, metrics))
        return built[0]

    try:
        with inprocess_app(s, rules_factory=rules_on) as ip:
            ip.rules, ip.site = built[0], site
            yield ip
    finally:
        for rules in built:
            rules.stop()


@contextmanager
def serve(app, port: int) -> Iterator[str]:
    """The in-process app on a real loopback socket (uvicorn in a thread, no lifespan: the
    engine and rules are handed in by ``inprocess_app``), for a real browser. Yields its URL."""
    import threading
    import time

    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, lifespan="off", log_level="warning",
                                           access_log=False))
    thread = threading.Thread(target=server.run, name="console-test-server", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
