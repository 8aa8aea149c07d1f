"""Run the HTTP service with uvicorn, settings from CAMPUSGUARD_* variables (and .env)."""

from __future__ import annotations

import argparse
import logging
import signal
import threading

import uvicorn

from app.config import load_settings
from app.core.logs import configure_logging
from app.core.memory import tune_allocator

log = logging.getLogger("campusguard")


def configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default=None, help="default: CAMPUSGUARD_HOST or 0.0.0.0")
    parser.add_argument("--port", type=int, default=None, help="default: CAMPUSGUARD_PORT or 8000")


def run(args: argparse.Namespace) -> int:
    tune_allocator()  # before any worker thread creates its own malloc arena
    overrides = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    settings = load_settings(**overrides)
    configure_logging(settings.log_format, settings.log_level)
    from app.main import create_app

    app = create_app(settings)
    config = uvicorn.Config(app, host=settings.host, port=settings.port, log_config=None, access_log=False,
                            timeout_graceful_shutdown=settings.drain_timeout_s, lifespan="on")
    server = uvicorn.Server(config)
    # uvicorn re-raises SIGTERM after its graceful shutdown; a no-op handler underneath makes
    # a drained shutdown exit 0 (what orchestrators expect), not "killed by signal".
    signal.signal(signal.SIGTERM, lambda *_: None)
    signal.signal(signal.SIGHUP, lambda *_: _reload_rules(app))
    server.run()
    if not server.started:
        return 1  # lifespan startup failed (bad settings, device, site file): already logged
    return 0


def _reload_rules(app) -> None:
    rules = app.state.rules
    if not rules.enabled:
        log.info("SIGHUP: no site configuration to reload")
        return

    # off the signal handler: reading and validating the file must not block the event loop
    threading.Thread(target=rules.reload_or_log, name="campusguard-reload", daemon=True).start()
