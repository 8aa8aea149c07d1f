"""The production app in-process with the example site file and a real rules service (console tests)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from app.config import Settings
from app.core.metrics import Metrics
from app.rules.service.facade import RulesService
from app.wiring import build_rules
from tests.support.inprocess import IMGSZ, InProcess, inprocess_app
from tests.support.rules_util import EXAMPLE_SITE


@contextmanager
def site_app(tmp: Path, **settings) -> Iterator[InProcess]:
    """``ip.rules`` is the rules service, ``ip.site`` the copy of the example site file it uses."""
    site = tmp / "site.yaml"
    shutil.copy(EXAMPLE_SITE, site)
    s = Settings(imgsz=IMGSZ, threads=1, preprocess_workers=1, warmup_iters=0, site_config=site,
                 events_db_url=f"sqlite:///{tmp}/e.db", snapshot_dir=tmp / "snaps", clips=False, **settings)
    rules = build_rules(s, Metrics())
    try:
        with inprocess_app(s, rules=rules) as ip:
            ip.rules, ip.site = rules, site
            yield ip
    finally:
        rules.stop()
