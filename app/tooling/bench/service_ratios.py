"""`campusguard bench --stage service`: issue #28's "Done when" ratios, side by side in one run.

Contestants, timed in interleaved rounds (each round gives every contestant the same slice
of wall time, so load from other processes hits them alike; the ratios are the medians of
the per-round ratios):

* the server (real ``campusguard serve`` subprocesses, onnx, IMGSZ 640 + SHAPES 384x640,
  fp32 and int8) fed by 4 concurrent HTTP clients on this machine, on a 1080p camera-like
  JPEG (a real image up-scaled, q90) and on ``bus.jpg``;
* the bare ``session.run`` of the same model, shape (384x640) and precision, batch 1, on an
  already letterboxed frame (no decoding);
* the bare Python loop of full ``cv2.imdecode`` + letterbox + ``session.run`` (bus.jpg, 640);
* the plain Ultralytics ``predict`` loop on the ``.pt`` with the 1080p JPEG's path.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

Step = Callable[[], int]


def server_step(url: str, data: bytes, clients: int) -> Callable[[float], int]:
    """``clients`` threads posting ``data`` for ``seconds``; returns the answers counted."""
    import httpx

    def run(seconds: float) -> int:
        done = [0] * clients
        stop = time.perf_counter() + seconds

        def client(k: int) -> None:
            with httpx.Client(base_url=url, timeout=60) as http:
                while time.perf_counter() < stop:
                    r = http.post("/detect", content=data, headers={"Content-Type": "image/jpeg"})
                    r.raise_for_status()
                    done[k] += 1

        threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return sum(done)

    return run


def loop_step(step: Step) -> Callable[[float], int]:
    def run(seconds: float) -> int:
        n, stop = 0, time.perf_counter() + seconds
        while time.perf_counter() < stop:
            n += step()
        return n

    return run


def start_server(env: dict[str, str], port: int, log: Path) -> subprocess.Popen:
    full = os.environ | env | {"CAMPUSGUARD_HOST": "127.0.0.1", "CAMPUSGUARD_PORT": str(port),
                               "CAMPUSGUARD_API_KEYS": "", "CAMPUSGUARD_LOG_LEVEL": "WARNING"}
    return subprocess.Popen([sys.executable, "-m", "app.cli", "serve"], env=full, stdout=log.open("wb"),
                            stderr=subprocess.STDOUT)


def wait_ready(url: str, proc: subprocess.Popen, timeout: float = 900) -> None:
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server {url} exited with {proc.returncode}")
        try:
            if httpx.get(f"{url}/health/ready", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1)
    raise RuntimeError(f"server {url} not ready in {timeout}s")


def run_service(args) -> dict[str, Any]:
    import cv2

    from app import wiring
    from app.config import Settings
    from app.inference.vision.decode import image_files
    from app.inference.vision.preprocess import letterbox, to_batch
    from app.tooling.bench.camera_frames import camera_jpegs
    import ultralytics

    weights = Path(dict(args.weights).get("n", "../shared/models/yolov8n.pt")).resolve()
    cache = (args.onnx_cache_dir or Path(".cache/campusguard")).resolve()
    threads = args.threads or os.cpu_count() or 2
    base = {"backend": "onnx", "weights": weights, "imgsz": 640, "shapes": "384x640", "threads": threads,
            "onnx_cache_dir": cache, "calibration_images": args.calibration_images}
    frame = camera_jpegs(image_files(args.images), (1920, 1080), count=1)[0]
    bus = (Path(ultralytics.__file__).parent / "assets" / "bus.jpg").read_bytes()
    bare: dict[str, Step] = {}
    for precision in ("fp32", "int8"):  # builds (and caches) the int8 models the int8 server then loads
        detector = wiring.load_detector(Settings(_env_file=None, precision=precision, **base))
        boxed = letterbox(cv2.cvtColor(cv2.imdecode(np.frombuffer(frame, np.uint8), 1), cv2.COLOR_BGR2RGB),
                          (384, 640))[0]
        bare[precision] = (lambda call: (lambda: (call(), 1)[1]))(detector.raw_call(to_batch([boxed])))
        if precision == "fp32":
            session = detector.member((640, 640))

            def full_loop(session=session) -> int:
                img = cv2.cvtColor(cv2.imdecode(np.frombuffer(bus, np.uint8), cv2.IMREAD_COLOR), cv2.COLOR_BGR2RGB)
                session.infer(to_batch([letterbox(img, 640)[0]]))
                return 1

            bare["full-decode loop"] = full_loop
    from ultralytics import YOLO

    yolo = YOLO(str(weights), task="detect")
    tmp = Path(tempfile.mkdtemp(prefix="campusguard-ratios-"))
    (tmp / "frame-1080p.jpg").write_bytes(frame)
    bare["ultralytics"] = lambda: (yolo.predict(str(tmp / "frame-1080p.jpg"), verbose=False), 1)[1]
    servers, urls = {}, {}
    variants = [(precision, t) for precision in ("fp32", "int8") for t in args.server_threads or [threads]]
    for i, (precision, t) in enumerate(variants):
        env = {f"CAMPUSGUARD_{k.upper()}": str(v) for k, v in base.items()} | {
            "CAMPUSGUARD_PRECISION": precision, "CAMPUSGUARD_WARMUP_ITERS": "2", "CAMPUSGUARD_THREADS": str(t)}
        key = f"{precision} t{t}"
        urls[key] = f"http://127.0.0.1:{args.port + i}"
        servers[key] = start_server(env, args.port + i, tmp / f"server-{precision}-t{t}.log")
    try:
        for key, proc in servers.items():
            wait_ready(urls[key], proc)
        contestants: dict[str, Callable[[float], int]] = {}
        for precision in ("fp32", "int8"):
            for key in (k for k in urls if k.startswith(precision)):
                contestants[f"server {key} 1080p"] = server_step(urls[key], frame, args.clients)
            contestants[f"bare session.run {precision} 384x640 t{threads}"] = loop_step(bare[precision])
        for key in (k for k in urls if k.startswith("fp32")):
            contestants[f"server {key} bus.jpg"] = server_step(urls[key], bus, args.clients)
        contestants[f"bare full-decode loop bus.jpg t{threads}"] = loop_step(bare["full-decode loop"])
        contestants["ultralytics predict 1080p"] = loop_step(bare["ultralytics"])
        return measure(contestants, args.stage_seconds, args.rounds, threads)
    finally:
        for proc in servers.values():
            proc.terminate()
            proc.wait(timeout=30)


RATIOS = {  # label -> (numerator prefix, denominator prefix); one ratio per server variant
    "fp32: server / bare session.run (>= 0.90)": ("server fp32 t", " 1080p", "bare session.run fp32"),
    "int8: server / bare session.run (>= 0.85)": ("server int8 t", " 1080p", "bare session.run int8"),
    "bus.jpg: server / bare full-decode loop (>= 1.00)": ("server fp32 t", " bus.jpg", "bare full-decode loop"),
    "int8 server / Ultralytics predict loop (>= 3)": ("server int8 t", " 1080p", "ultralytics predict"),
}


def measure(contestants: dict[str, Callable[[float], int]], seconds: float, rounds_n: int,
            threads: int) -> dict[str, Any]:
    share = seconds / rounds_n / len(contestants)
    rates: dict[str, list[float]] = {name: [] for name in contestants}
    for name, run in contestants.items():  # one untimed slice each: connections, caches
        run(min(2.0, share))
    for _ in range(rounds_n):
        for name, run in contestants.items():
            t0 = time.perf_counter()
            n = run(share)
            rates[name].append(n / (time.perf_counter() - t0))
    ratios = {}
    for label, (prefix, suffix, reference) in RATIOS.items():
        ref = next(name for name in rates if name.startswith(reference))
        for name in (n for n in rates if n.startswith(prefix) and n.endswith(suffix)):
            server_threads = name[len(prefix):].split(" ")[0]
            ratios[f"{label}, server {server_threads} thread(s) vs {threads}"] = float(
                np.median(np.array(rates[name]) / np.array(rates[ref])))
    return {"img_s": {name: float(np.median(r)) for name, r in rates.items()}, "per_round": rates, "ratios": ratios}
