"""`campusguard bench-swap`: the weights behind a name replaced under load (issue 41 part 3).

A real ``campusguard serve`` (a subprocess on a free loopback port, with an admin key, its
weights and a second weights file in a models folder of its own) is fed by 4 ``http.client``
keep-alive clients (threads: the standard library's client costs a third of httpx's CPU on
the cores the server runs on) posting 1920x1080 JPEG frames (real images up-scaled, q90) at
full rate. At ``--swap-at`` the weights behind the name are replaced with
``PUT /admin/models/{name}`` (the new copy loads beside the serving one at low priority, then
the traffic moves and the old engine drains: app/flow/modelswap.py). The resident memory of
the server process is sampled with psutil throughout, and after the run until ``GET /models``
shows the change finished (the old copy freed). The figures and the issue's bounds are
computed in app/tooling/bench/swap_report.py.
"""

from __future__ import annotations

import http.client
import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FRAME_SIZE = (1920, 1080)


@dataclass(frozen=True, slots=True)
class SwapPlan:
    """What one run does (the command's options)."""

    weights: Path
    swap_weights: Path | None = None  # None: a copy of ``weights``
    duration_s: float = 60.0
    swap_at_s: float = 30.0
    clients: int = 4
    imgsz: str | None = None  # None: the service's default (CAMPUSGUARD_IMGSZ, else 640)
    backend: str | None = None  # None: the service's default (CAMPUSGUARD_BACKEND, else auto)
    cache_dir: Path = Path(".cache/campusguard")
    ready_timeout_s: float = 900.0
    drained_timeout_s: float = 180.0


@dataclass(slots=True)
class Reply:
    """One request: when it was sent and answered (seconds since the load began) and how."""

    sent: float
    done: float
    status: int  # 0: no HTTP answer (connection error)
    error: str = ""

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


@dataclass(slots=True)
class SwapRun:
    """What a run observed; ``swap_report.summarize`` turns it into figures and bounds."""

    replies: list[Reply] = field(default_factory=list)
    rss: list[tuple[float, int]] = field(default_factory=list)  # (seconds since the load began, bytes)
    swap: dict[str, Any] = field(default_factory=dict)
    models_before: dict[str, Any] = field(default_factory=dict)
    models_after: dict[str, Any] = field(default_factory=dict)
    rss_after: int | None = None  # once GET /models shows no change, after the load
    drained_at_s: float | None = None  # when GET /models first showed no change after the switch, under load
    drained_after_s: float | None = None  # how long after the load that took (0 when it had under load)
    server: dict[str, Any] = field(default_factory=dict)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def camera_frames() -> list[bytes]:
    """1920x1080 q90 JPEGs made from the real images that ship with Ultralytics."""
    from ultralytics.utils import ASSETS

    from app.tooling.bench.camera_frames import camera_jpegs

    return camera_jpegs([Path(ASSETS) / "bus.jpg", Path(ASSETS) / "zidane.jpg"], FRAME_SIZE, count=2, quality=90)


class Server:
    """``campusguard serve`` in a subprocess over a models folder of its own, with an admin key."""

    def __init__(self, plan: SwapPlan, folder: Path) -> None:
        self.plan, self.folder = plan, folder
        self.models = folder / "models"
        self.models.mkdir()
        self.served = self.models / f"{plan.weights.stem}{plan.weights.suffix}"
        shutil.copyfile(plan.weights, self.served)
        source = plan.swap_weights or plan.weights
        self.swap_file = self.models / f"{plan.weights.stem}-swap{source.suffix}"
        shutil.copyfile(source, self.swap_file)
        self.name = plan.weights.stem
        self.key = secrets.token_urlsafe(24)
        self.port = free_port()
        self.log = folder / "server.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def headers(self) -> dict[str, str]:
        return {"X-API-Key": self.key}

    def start(self) -> None:
        env = {key: value for key, value in os.environ.items()
               if key not in ("CAMPUSGUARD_MODELS_FILE", "CAMPUSGUARD_SITE_CONFIG", "CAMPUSGUARD_API_KEYS_FILE")}
        env |= {"CAMPUSGUARD_HOST": "127.0.0.1", "CAMPUSGUARD_PORT": str(self.port),
                "CAMPUSGUARD_API_KEYS": f"admin:{self.key}", "CAMPUSGUARD_WEIGHTS": str(self.served),
                "CAMPUSGUARD_MODELS_DIR": str(self.models), "CAMPUSGUARD_DATA_DIR": str(self.folder / "data"),
                "CAMPUSGUARD_ONNX_CACHE_DIR": str(self.plan.cache_dir.resolve()), "CAMPUSGUARD_INGEST": "off",
                "CAMPUSGUARD_LOG_LEVEL": "WARNING"}
        if self.plan.imgsz is not None:
            env["CAMPUSGUARD_IMGSZ"] = self.plan.imgsz
        if self.plan.backend is not None:
            env["CAMPUSGUARD_BACKEND"] = self.plan.backend
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "app.cli", "serve"], env=env, stdout=out,
                                         stderr=subprocess.STDOUT)

    def wait_ready(self, timeout: float, tick: Callable[[], None] = lambda: None) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"the server exited while starting; its log ends:\n{self.log_tail()}")
            try:
                if self.request("GET", "/health/ready", timeout=2)[0] == 200:
                    return
            except OSError:
                pass
            tick()
            time.sleep(0.5)
        raise RuntimeError(f"the server was not ready in {timeout:g} s; its log ends:\n{self.log_tail()}")

    def request(self, method: str, path: str, body: dict | None = None, timeout: float = 30.0,
                ) -> tuple[int, Any]:
        """One JSON request on a connection of its own: (status, parsed body or text)."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            data = json.dumps(body).encode() if body is not None else None
            conn.request(method, path, body=data, headers=self.headers | {"Content-Type": "application/json"})
            reply = conn.getresponse()
            raw = reply.read()
            try:
                return reply.status, json.loads(raw)
            except ValueError:
                return reply.status, raw.decode(errors="replace")[:500]
        finally:
            conn.close()

    def model(self) -> dict[str, Any]:
        status, body = self.request("GET", "/models")
        if status != 200:
            raise RuntimeError(f"GET /models answered {status}: {body}")
        return next(m for m in body["models"] if m["name"] == self.name)

    def rss(self) -> int | None:
        import psutil

        try:
            return int(psutil.Process(self.proc.pid).memory_info().rss) if self.proc is not None else None
        except psutil.Error:
            return None

    def log_tail(self, chars: int = 3000) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def client(server: Server, frame: bytes, start: float, stop: threading.Event, out: list[Reply]) -> None:
    """Post ``frame`` at full rate on one keep-alive connection until ``stop``; a connection
    error is a failed request, and the client reconnects."""
    headers = server.headers | {"Content-Type": "image/jpeg"}
    conn: http.client.HTTPConnection | None = None
    while not stop.is_set():
        if conn is None:
            conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        sent = time.monotonic() - start
        try:
            conn.request("POST", "/detect", body=frame, headers=headers)
            reply = conn.getresponse()
            body = reply.read()
            error = "" if 200 <= reply.status < 300 else body.decode(errors="replace")[:200]
            out.append(Reply(sent, time.monotonic() - start, reply.status, error))
        except (OSError, http.client.HTTPException) as exc:
            out.append(Reply(sent, time.monotonic() - start, 0, f"{type(exc).__name__}: {exc}"[:200]))
            conn.close()
            conn = None
    if conn is not None:
        conn.close()


def window_covered(run: SwapRun, now: float, window_s: float = 5.0) -> bool:
    """The load goes on past ``duration_s`` until ``window_s`` after the switch (a slow swap
    still has load on both sides of it); a swap that never answered ends it with the duration."""
    switched = run.swap.get("switched_s")
    return not run.swap or switched is None or run.swap.get("status") != 200 or now >= switched + window_s


def swap(server: Server, start: float, run: SwapRun) -> None:
    began = time.monotonic() - start
    try:
        status, body = server.request("PUT", f"/admin/models/{server.name}", {"weights": server.swap_file.name},
                                      timeout=600)
    except (OSError, http.client.HTTPException) as exc:
        status, body = 0, f"{type(exc).__name__}: {exc}"
    ended = time.monotonic() - start
    run.swap = {"started_s": round(began, 3), "switched_s": round(ended, 3), "seconds": round(ended - began, 3),
                "status": status, "weights": server.swap_file.name,
                "error": None if status == 200 else str(body)[:500]}


def run_swap(plan: SwapPlan, progress: Callable[[str, float, dict[str, int]], None]) -> SwapRun:
    """Start the server, load it, swap at ``swap_at_s``, wait for the old copy to be freed.
    ``progress(phase, seconds, counts)`` is called a few times a second."""
    run = SwapRun()
    frames = camera_frames()
    with tempfile.TemporaryDirectory(prefix="campusguard-bench-swap-") as tmp:
        server = Server(plan, Path(tmp))
        server.start()
        try:
            t0 = time.monotonic()
            server.wait_ready(plan.ready_timeout_s, lambda: progress("starting", time.monotonic() - t0, {}))
            run.server["ready_after_s"] = round(time.monotonic() - t0, 1)
            run.models_before = server.model()
            load(plan, server, frames, run, progress)
            t1 = time.monotonic()
            while True:  # the old copy is freed once GET /models shows no change
                entry = server.model()
                if not entry.get("change") or time.monotonic() - t1 > plan.drained_timeout_s:
                    break
                progress("draining", time.monotonic() - t1, {})
                time.sleep(0.2)
            run.drained_after_s = round(time.monotonic() - t1, 2) if not entry.get("change") else None
            time.sleep(1.0)  # the allocator's trim after the free
            run.rss_after = server.rss()
            run.models_after = server.model()
            status, health = server.request("GET", "/health")
            run.server |= {k: health.get(k) for k in ("backend", "precision", "device", "shapes", "model")
                           if isinstance(health, dict) and k in health}
        except BaseException:
            run.server["log_tail"] = server.log_tail()
            raise
        finally:
            server.stop()
    return run


def load(plan: SwapPlan, server: Server, frames: list[bytes], run: SwapRun,
         progress: Callable[[str, float, dict[str, int]], None]) -> None:
    """The clients for ``duration_s``, the swap at ``swap_at_s``, RSS sampled every 0.2 s."""
    stop = threading.Event()
    outs: list[list[Reply]] = [[] for _ in range(plan.clients)]
    start = time.monotonic()
    threads = [threading.Thread(target=client, args=(server, frames[i % len(frames)], start, stop, outs[i]),
                                name=f"bench-swap-client-{i}", daemon=True) for i in range(plan.clients)]
    swapper = threading.Thread(target=swap, args=(server, start, run), name="bench-swap-put", daemon=True)
    for thread in threads:
        thread.start()
    swapped = False
    while (now := time.monotonic() - start) < plan.duration_s or (swapped and not window_covered(run, now)):
        if not swapped and now >= plan.swap_at_s:
            swapper.start()
            swapped = True
        rss = server.rss()
        if rss is not None:
            run.rss.append((round(now, 2), rss))
        if run.swap and run.drained_at_s is None and not server.model().get("change"):
            run.drained_at_s = round(time.monotonic() - start, 2)  # the old copy freed, under load
        failed = sum(1 for out in outs for r in out if not r.ok)
        counts = {"ok": sum(len(out) for out in outs) - failed, "failed": failed}
        progress("swapping" if swapped and swapper.is_alive() else "load", now, counts)
        time.sleep(0.2)
    stop.set()
    for thread in threads:
        thread.join(90)
    if swapped:
        swapper.join(600)
    run.replies = sorted((r for out in outs for r in out), key=lambda r: r.sent)
