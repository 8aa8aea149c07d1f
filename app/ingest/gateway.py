"""`campusguard gateway`: pull the site file's camera sources and POST frames to the service.

    campusguard gateway --site site.yaml --service http://nginx:8000 [--shard i/n]
                        [--api-key-file /run/secrets/camera-key] [--secrets-dir /run/secrets]

For multi-replica deployments, where the detection replicas run with ingest off. Each
gateway pulls the cameras of its shard (``sha256(camera id) mod n == i``, the same on every
host), sends each frame with a ``camera``-role key and reports each camera's source state
(report.py). The site file is read by the service's own loader (every error at once, field
named); SIGHUP reloads it (cameras added, changed, removed); SIGTERM or SIGINT stops every
reader (no ffmpeg is left behind) and exits 0. A site file or option that cannot be used
exits 2 with the field named.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping
from pathlib import Path

from app.core.errors import ConfigError
from app.core.logs import configure_logging
from app.core.redact import redact_url
from app.core.secrets import SecretError, read_secret_file
from app.core.sharding import shard_of
from app.ingest.command import DEFAULT_MAX_PIXELS, FfmpegMissing
from app.ingest.frames import FrameFormat
from app.ingest.httpsink import HttpSink, parse_shard
from app.ingest.report import StateReporter
from app.ingest.source import SourceError, SourceSpec, resolve_site, sources_of
from app.ingest.supervisor import DEFAULT_MAX_READERS, Supervisor
from app.rules.site.loader import load_site_config

log = logging.getLogger("app.ingest.gateway")

KEY_ENV = "CAMPUSGUARD_GATEWAY_API_KEY"


class GatewayError(Exception):
    """A site file, key or option the gateway cannot run with (exit 2)."""


def load_sources(path: Path, index: int = 0, total: int = 1, environ: Mapping[str, str] | None = None,
                 secrets_dir: Path | None = None) -> dict[str, SourceSpec]:
    """The sources of this shard's cameras, by camera id, their ``${VAR}`` checked: the site
    file as the service reads it (SiteConfigError listing every problem, field named)."""
    config = load_site_config(path)
    mine = {cid: spec for cid, spec in sources_of(config).items() if shard_of(cid, total) == index}
    resolve_site(config, os.environ if environ is None else environ, secrets_dir, path, only=set(mine))
    return mine


def read_api_key(key_file: Path | None, environ: Mapping[str, str]) -> str | None:
    """The ``camera``-role key: from ``--api-key-file`` (default ``$CAMPUSGUARD_GATEWAY_API_KEY_FILE``,
    a Docker or Kubernetes secret file), else ``$CAMPUSGUARD_GATEWAY_API_KEY``.

    The file is read like every other ``_FILE`` setting (app/core/secrets.py: one line, size
    capped, errors naming the setting and never the value). Both given is refused, as for the
    service's settings: which one wins would be a guess."""
    if key_file is not None:
        if environ.get(KEY_ENV, "").strip():
            raise GatewayError(f"{KEY_ENV} and --api-key-file ({KEY_ENV}_FILE) are both set; set one")
        try:
            return read_secret_file(key_file, f"--api-key-file ({KEY_ENV}_FILE)").strip()
        except SecretError as exc:
            raise GatewayError(str(exc)) from None
    return environ.get(KEY_ENV, "").strip() or None


def configure(parser: argparse.ArgumentParser) -> None:
    env = os.environ.get
    parser.add_argument("--site", type=Path, default=env("CAMPUSGUARD_SITE_CONFIG"),
                        help="site file with cameras[].source (default: $CAMPUSGUARD_SITE_CONFIG)")
    parser.add_argument("--service", required=True, help="the service's base URL, e.g. http://nginx:8000")
    parser.add_argument("--shard", default="0/1", help="i/n: pull the cameras with sha256(id) mod n == i (default 0/1)")
    parser.add_argument("--api-key-file", type=Path, default=env(f"{KEY_ENV}_FILE") or None,
                        help=f"file holding a camera-role key (default: ${KEY_ENV}_FILE; else ${KEY_ENV})")
    parser.add_argument("--secrets-dir", type=Path, default=env("CAMPUSGUARD_SECRETS_DIR"),
                        help="a file named VAR here fills ${VAR} in source URLs (before the environment; "
                             "default: $CAMPUSGUARD_SECRETS_DIR)")
    parser.add_argument("--report-every-s", type=float, default=10.0, help="source state report interval")
    parser.add_argument("--max-pixels", type=int, default=env("CAMPUSGUARD_INGEST_MAX_PIXELS") or DEFAULT_MAX_PIXELS,
                        help="largest picture a stream may declare; larger: bad_stream "
                             "(default: $CAMPUSGUARD_INGEST_MAX_PIXELS or 4096x4096)")
    parser.add_argument("--max-readers", type=int, default=env("CAMPUSGUARD_INGEST_MAX_READERS") or DEFAULT_MAX_READERS,
                        help="streams this gateway pulls at most; more is refused "
                             "(default: $CAMPUSGUARD_INGEST_MAX_READERS or 64)")
    parser.add_argument("--timeout-s", type=float, default=10.0, help="HTTP timeout per frame")
    parser.add_argument("--gateway-id", default=None, help="name in state reports (default: host name)")
    parser.add_argument("--heartbeat-file", type=Path, default=env("CAMPUSGUARD_GATEWAY_HEARTBEAT_FILE"),
                        help="touched every --report-every-s while the gateway runs (container health checks)")
    parser.add_argument("--log-format", choices=["text", "json"], default=env("CAMPUSGUARD_LOG_FORMAT", "text"))
    parser.add_argument("--log-level", default=env("CAMPUSGUARD_LOG_LEVEL", "INFO"))


class _Signals:
    """SIGTERM/SIGINT stop, SIGHUP reloads; the main thread waits on one event."""

    def __init__(self) -> None:
        self.wake = threading.Event()
        self.stop = False
        self.reload = False

    def install(self) -> None:
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, self._on_reload)

    def _on_stop(self, *_: object) -> None:
        self.stop = True
        self.wake.set()

    def _on_reload(self, *_: object) -> None:
        self.reload = True
        self.wake.set()


def run(args: argparse.Namespace) -> int:
    configure_logging(args.log_format, args.log_level)
    try:
        if args.site is None:
            raise GatewayError("no site file: pass --site or set CAMPUSGUARD_SITE_CONFIG")
        index, total = parse_shard(args.shard)
        key = read_api_key(args.api_key_file, os.environ)
        sources = load_sources(args.site, index, total, os.environ, args.secrets_dir)
    except (GatewayError, ConfigError, ValueError) as exc:
        print(f"campusguard gateway: error: {exc}", file=sys.stderr)
        return 2
    if key is None:
        log.warning("no API key (--api-key-file or %s): the service must accept frames without one", KEY_ENV)
    sinks: dict[str, HttpSink] = {}

    def sink_for(camera_id: str) -> HttpSink:
        if camera_id not in sinks:
            sinks[camera_id] = HttpSink(args.service, camera_id, key, timeout_s=args.timeout_s)
        return sinks[camera_id]

    reporter: StateReporter | None = None
    supervisor = Supervisor(sink_for, output=FrameFormat.JPEG, secrets_dir=args.secrets_dir,
                            max_pixels=args.max_pixels, max_readers=args.max_readers,
                            listener=lambda state: reporter.notify(state) if reporter else None)
    reporter = StateReporter(args.service, key, supervisor.states, gateway_id=args.gateway_id,
                             interval_s=args.report_every_s)
    signals = _Signals()
    signals.install()
    try:
        supervisor.start(sources)
    except (SourceError, FfmpegMissing) as exc:
        print(f"campusguard gateway: error: {exc}", file=sys.stderr)
        supervisor.stop()
        return 2
    reporter.start()
    log.info("gateway: pulling %d cameras (shard %d/%d) for %s", len(sources), index, total,
             redact_url(args.service))
    try:
        while not signals.stop:
            _beat(args.heartbeat_file)
            signals.wake.wait(args.report_every_s)
            signals.wake.clear()
            if signals.reload and not signals.stop:
                signals.reload = False
                _reload(args, index, total, supervisor, sinks)
                reporter.notify()
    finally:
        supervisor.stop()
        reporter.stop()
        for sink in sinks.values():
            sink.close()
        log.info("gateway stopped")
    return 0


def _beat(path: Path | None) -> None:
    """The heartbeat file's mtime says the main loop runs (compose and Kubernetes health checks)."""
    if path is not None:
        try:
            path.touch()
        except OSError as exc:
            log.warning("cannot touch the heartbeat file %s: %s", path, exc.strerror)


def _reload(args: argparse.Namespace, index: int, total: int, supervisor: Supervisor,
            sinks: dict[str, HttpSink]) -> None:
    """SIGHUP: apply the site file as it is now; a file that cannot be used changes nothing."""
    try:
        sources = load_sources(args.site, index, total, os.environ, args.secrets_dir)
        supervisor.update(sources)
    except (ConfigError, SourceError) as exc:
        log.error("site file not reloaded (the cameras keep running as before): %s", exc)
        return
    for camera_id in [cid for cid in sinks if cid not in sources]:
        sinks.pop(camera_id).close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="campusguard gateway", description=__doc__.strip().splitlines()[0])
    configure(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
