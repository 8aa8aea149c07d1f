"""``CAMPUSGUARD_FRONTENDS`` = N > 1: the owner process and its N front-end processes (issue 40).

This process is the **owner**: it binds the public socket once, runs the service's app as
one process does (its lifespan: the engines, the rules, the store, delivery, the shadow lane,
the audit trail, the keys-file watcher, site reloads) but serves no HTTP itself: it answers
the front ends over a Unix socket (app/frontend/bridge.py). N front-end processes
(``python -m app.frontend``) inherit the socket and serve it (app/frontend/proxy.py). A
front end that dies is restarted (its in-flight requests are lost, the others keep serving);
when the owner dies its front ends leave too, and the orchestrator restarts the container.

Shutdown (SIGTERM, SIGINT) drains from the outside in: the front ends stop accepting and
finish their open requests (which the owner still answers), then the owner shuts down.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import uvicorn

from app.api.state import state_of
from app.config import Settings
from app.frontend.bridge import Bridge
from app.frontend.process import FrontendOptions
from app.frontend.series import FrontendSeries
from app.wiring.compact import CompactFrames

log = logging.getLogger("campusguard")
RESTART_PAUSE_S = 1.0  # a front end that dies at once is not restarted in a tight loop


def bind_public(host: str, port: int, backlog: int = 2048) -> socket.socket:
    """The public listening socket, bound once here and inherited by every front end."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.create_server((host, port), family=family, backlog=backlog)
    sock.set_inheritable(True)
    return sock


class Frontends:
    """Starts N front-end processes on ``sock`` and restarts one that dies (a watcher thread)."""

    def __init__(self, count: int, sock: socket.socket, owner: str, settings: Settings,
                 series: FrontendSeries) -> None:
        self.count, self.sock, self.owner, self.settings, self.series = count, sock, owner, settings, series
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.restarts = 0
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="campusguard-frontends", daemon=True)

    def describe(self) -> dict[str, int]:
        """What /health shows of them (``processes``)."""
        return {"frontends": self.count, "alive": len(self.pids()), "restarts": self.restarts}

    def pids(self) -> list[int]:
        return [p.pid for p in list(self.procs.values()) if p.returncode is None]

    def _spawn(self, index: int) -> None:
        s = self.settings
        options = FrontendOptions(fd=self.sock.fileno(), owner=self.owner, index=index,
                                  graceful_s=s.drain_timeout_s, log_format=s.log_format, log_level=s.log_level)
        self.procs[index] = subprocess.Popen([sys.executable, "-m", "app.frontend", options.dumps()],
                                             pass_fds=(self.sock.fileno(),), start_new_session=False)

    def start(self) -> None:
        for index in range(self.count):
            self._spawn(index)
        self.series.follow(self.pids)
        self._thread.start()
        log.info("%d front-end processes on %s (pids %s); this process owns the engine, the rules and the state",
                 self.count, self.sock.getsockname(), ", ".join(map(str, self.pids())))

    def _watch(self) -> None:
        while not self._stopping.is_set():
            for index, proc in list(self.procs.items()):
                if proc.returncode is not None or not self._reap(proc):
                    continue
                if self._stopping.is_set():
                    return
                log.warning("front end %d (pid %d) exited with %s: restarting it", index, proc.pid, proc.returncode)
                self.series.restarts.inc()
                self.restarts += 1
                time.sleep(RESTART_PAUSE_S)
                self._spawn(index)
            self._stopping.wait(0.2)

    def _reap(self, proc: subprocess.Popen[bytes]) -> bool:
        """True when ``proc`` has exited (reaped here, its CPU kept in the series)."""
        try:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        except ChildProcessError:
            proc.returncode = -1
            return True
        if pid == 0:
            return False
        proc.returncode = os.waitstatus_to_exitcode(status)
        self.series.reaped(usage.ru_utime + usage.ru_stime)
        return True

    def stop(self, timeout_s: float) -> None:
        """SIGTERM every front end, wait for them to drain (``timeout_s``), kill what is left."""
        self._stopping.set()
        if self._thread.is_alive():
            self._thread.join()
        live = [p for p in self.procs.values() if p.returncode is None]
        for proc in live:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in live:
            while proc.returncode is None and not self._reap(proc) and time.monotonic() < deadline:
                time.sleep(0.05)
            if proc.returncode is None:
                proc.kill()
                proc.wait()


class OwnerServer(uvicorn.Server):
    """uvicorn running the app's lifespan with no socket of its own; its first exit signal
    drains the front ends before the owner shuts down."""

    frontends: Frontends | None = None
    drain_s: float = 30.0
    _draining = False

    def handle_exit(self, sig: int, frame: Any) -> None:
        if self._draining or self.frontends is None:
            super().handle_exit(sig, frame)  # a second signal: uvicorn's forced exit
            return
        self._draining = True
        frontends = self.frontends
        threading.Thread(target=self._drain, args=(frontends,), name="campusguard-drain", daemon=True).start()

    def _drain(self, frontends: Frontends) -> None:
        frontends.stop(self.drain_s + 2.0)
        self.should_exit = True


def serve_frontends(app: Any, settings: Settings, config: uvicorn.Config) -> int:
    """Run the owner and ``settings.frontends`` front ends until a signal; the exit code."""
    sock = bind_public(settings.host, settings.port)
    folder = Path(tempfile.mkdtemp(prefix="campusguard-owner-"))
    series = FrontendSeries.of(state_of(app).metrics)
    server = OwnerServer(config)
    server.drain_s = settings.drain_timeout_s
    try:
        with asyncio.Runner(loop_factory=config.get_loop_factory()) as runner:  # uvloop where uvicorn picks it
            return runner.run(_owner(app, server, sock, str(folder / "owner.sock"), settings, series))
    finally:
        sock.close()
        shutil.rmtree(folder, ignore_errors=True)


async def _owner(app: Any, server: OwnerServer, sock: socket.socket, path: str, settings: Settings,
                 series: FrontendSeries) -> int:
    serving = asyncio.create_task(server.serve(sockets=[]))
    while not server.started and not serving.done():
        await asyncio.sleep(0.05)
    if not server.started:
        await serving
        return 1  # lifespan startup failed: already logged
    bridge = Bridge(app, path, series, CompactFrames(state_of(app), settings.forwarded_allow_ips))
    await bridge.start()
    frontends = Frontends(settings.frontends, sock, path, settings, series)
    frontends.start()
    state_of(app).processes.put(frontends.describe)
    server.frontends = frontends
    try:
        await serving
    finally:
        await bridge.stop()
        if any(p.returncode is None for p in frontends.procs.values()):
            await asyncio.to_thread(frontends.stop, 2.0)
    return 0
