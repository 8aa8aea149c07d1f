"""Run the HTTP service with uvicorn, settings from CAMPUSGUARD_* variables (and .env).

``--starter-site`` (what ``make run`` passes) turns the rules on for a first run: the site
file is CAMPUSGUARD_SITE_CONFIG, else ``<data_dir>/site.yaml``, created from a starter when
it is missing (app/tooling/demo/site.py). Without it and without CAMPUSGUARD_SITE_CONFIG the
rules stay off, as the tests, compose and Kubernetes expect.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path

import uvicorn

from app.config import Settings, load_settings
from app.core.logs import configure_logging
from app.core.memory import tune_allocator

log = logging.getLogger("campusguard")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=None, help="default: CAMPUSGUARD_HOST or 127.0.0.1 (any other address "
                        "needs an API key, or CAMPUSGUARD_AUTH=off)")
    parser.add_argument("--port", type=int, default=None, help="default: CAMPUSGUARD_PORT or 8000")
    parser.add_argument("--starter-site", action="store_true", help="rules on: use CAMPUSGUARD_SITE_CONFIG or "
                        "<data_dir>/site.yaml, creating a starter site file there if it is missing (make run)")


def run(args: argparse.Namespace) -> int:
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    if args.starter_site:  # `make run`: the first run's site file, and what to do next
        from app.tooling.demo.site import next_steps

        settings = load_settings(**overrides)
        overrides["site_config"] = starter_site(settings)
        print(next_steps(settings.host, settings.port), file=sys.stderr)
    return serve(overrides)


def starter_site(settings: Settings) -> Path:
    """The site file of a first run, created from the starter when missing."""
    from app.tooling.demo.site import ensure_starter

    path = settings.site_config or settings.data_dir / "site.yaml"
    if ensure_starter(path):
        print(f"campusguard serve: created a starter site file at {path} (cameras, zones and rules: docs/rules.md)",
              file=sys.stderr)
    return path


def serve(overrides: dict) -> int:
    """Start the service with the environment's settings and ``overrides``; the exit code."""
    tune_allocator()  # before any worker thread creates its own malloc arena
    settings = load_settings(**overrides)
    from app.wiring import auth_mode, check_models, check_site, default_settings, load_catalog, resolve_runtime

    auth_mode(settings)  # exposed without a key: refuse (exit 2) before anything loads
    catalog = load_catalog(settings)  # CAMPUSGUARD_MODELS_FILE: a bad file, a path outside the models folder: exit 2
    choice = resolve_runtime(default_settings(settings, catalog))  # a precision or weights it cannot run: exit 2
    check_models(settings, catalog)  # the same for every other model of the models file
    check_site(settings, catalog)  # an invalid site file, a camera's model or class unknown: exit 2, field named
    configure_logging(settings.log_format, settings.log_level)
    from app.main import create_app

    app = create_app(settings, choice, catalog)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_config=None, access_log=False,
                            # uvicorn types it int but takes any number (asyncio.timeout): keep fractions
                            timeout_graceful_shutdown=settings.drain_timeout_s,  # type: ignore[arg-type]
                            lifespan="on",
                            proxy_headers=False)  # X-Forwarded-For is read and checked in app/api/forwarded.py
    server = uvicorn.Server(config)
    # uvicorn re-raises SIGTERM after its graceful shutdown; a no-op handler underneath makes
    # a drained shutdown exit 0 (what orchestrators expect), not "killed by signal".
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.signal(signal.SIGHUP, lambda *_: _reload(app))
    if settings.frontends > 1:  # the owner and its front-end processes (docs/deploy.md)
        from app.wiring.frontends import serve_frontends

        return serve_frontends(app, settings, config)
    server.run()
    if not server.started:
        return 1  # lifespan startup failed (bad settings, device, site file): already logged
    return 0


def _reload(app) -> None:
    """SIGHUP: re-read the keys file and the site file, off the signal handler (reading and
    validating files must not block the event loop)."""
    threading.Thread(target=_reload_files, args=(app,), name="campusguard-reload", daemon=True).start()


def _reload_files(app) -> None:
    from app.api.state import state_of

    state = state_of(app)
    state.gate.keys.reload_or_log("signal")
    rules = state.rules.get()
    if not rules.enabled:
        log.info("SIGHUP: no site configuration to reload")
        return
    if rules.reload_or_log():
        from app.core.audit import AuditEntry

        state.gate.audit.get().record(AuditEntry(actor="system:signal", action="site.reload", target="site"))
