"""`campusguard bench --stage service`: issues #28 and #32's "Done when" ratios, side by side in one run.

Contestants, timed in interleaved rounds (each round gives every contestant the same slice
of wall time, so load from other processes hits them alike; the ratios are the medians of
the per-round ratios):

* the servers (real ``campusguard serve`` subprocesses, one per ``--service-variants`` entry,
  backend:precision, default onnx fp32 and int8; IMGSZ + SHAPES = the 16:9 shape, 384x640 at
  640) fed by 4 concurrent HTTP clients on this machine, on a 1080p camera-like JPEG (a real
  image up-scaled, q90) and, for onnx fp32, on ``bus.jpg``;
* the bare model call (``raw_call``: ``session.run``, OpenVINO's ``infer``) of each variant at
  the 16:9 shape, batch 1, on an already letterboxed frame (no decoding);
* the bare Python loop of full ``cv2.imdecode`` + letterbox + ``session.run`` (bus.jpg, onnx fp32);
* the plain Ultralytics ``predict`` loop on the ``.pt`` with the 1080p JPEG's path;
* the anchor (issue #32, ``--anchor``, with the openvino extra): Ultralytics ``predict`` with the
  same JPEG's path on its own OpenVINO int8 export at the 16:9 shape (app/tooling/bench/anchor.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

Step = Callable[[], int]


def server_step(url: str, data: bytes, clients: int) -> Callable[[float], int]:
    """``clients`` threads posting ``data`` for ``seconds``, each on its own keep-alive
    connection; returns the answers counted. The clients run on the cores the server they
    measure runs on, so they are the standard library's ``http.client``: 0.3 ms of CPU per
    request against httpx's 0.9 (measured here), 2-3 % of what an int8 server spends on an
    image. An answer other than 200, a socket error or a broken answer (``http.client``'s
    ``HTTPException``s: a truncated body, a bad status line) ends that client, and the step
    raises it once every client has stopped: a rate measured with failed requests is not a rate."""
    import http.client
    from urllib.parse import urlsplit

    address = urlsplit(url)
    if address.scheme not in ("http", "https"):
        raise ValueError(f"the server's URL must be http or https, got {url!r}")
    if not address.hostname:
        raise ValueError(f"the server's URL names no host, got {url!r}")
    host = address.hostname
    connect = http.client.HTTPSConnection if address.scheme == "https" else http.client.HTTPConnection
    path = address.path.rstrip("/") + "/detect"

    def run(seconds: float) -> int:
        done = [0] * clients
        errors: list[str] = []
        stop = time.perf_counter() + seconds

        def client(k: int) -> None:
            connection = connect(host, address.port, timeout=60)
            try:
                while time.perf_counter() < stop:
                    connection.request("POST", path, body=data, headers={"Content-Type": "image/jpeg"})
                    response = connection.getresponse()
                    response.read()
                    if response.status != 200:
                        errors.append(f"POST {path} answered {response.status}")
                        return
                    done[k] += 1
            except (OSError, http.client.HTTPException) as exc:
                errors.append(f"POST {path} failed: {type(exc).__name__}: {exc}")
            finally:
                connection.close()

        threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise RuntimeError(f"{len(errors)} of {clients} clients failed: {errors[0]}")
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


def variant_name(backend: str, precision: str) -> str:
    return f"{backend} {precision}"


def run_service(args) -> dict[str, Any]:
    import cv2
    import ultralytics

    from app import wiring
    from app.config import Settings
    from app.core.imgsz import format_imgsz, input_hw
    from app.inference.backends.shapeset import ShapeSet
    from app.inference.vision.decode import image_files
    from app.inference.vision.preprocess import letterbox, to_batch
    from app.inference.vision.shapes import aspect_shape
    from app.tooling.bench.camera_frames import camera_jpegs

    weights = Path(dict(args.weights).get("n", "../shared/models/yolov8n.pt")).resolve()
    cache = (args.onnx_cache_dir or Path(".cache/campusguard")).resolve()
    threads = args.threads or os.cpu_count() or 2
    primary = max(input_hw(args.imgsz))
    wide = aspect_shape(1920, 1080, primary)  # the 16:9 aspect class: 384x640 at 640
    base = {"weights": weights, "imgsz": args.imgsz, "shapes": format_imgsz(wide), "threads": threads,
            "onnx_cache_dir": cache, "calibration_images": args.calibration_images}
    variants = [tuple(v.split(":")) for v in args.service_variants]
    frame = camera_jpegs(image_files(args.images), (1920, 1080), count=1)[0]
    bus = (Path(ultralytics.__file__).parent / "assets" / "bus.jpg").read_bytes()

    def rgb(jpeg: bytes) -> np.ndarray:
        img = cv2.imdecode(np.frombuffer(jpeg, np.uint8), cv2.IMREAD_COLOR)
        if img is None:
            raise ValueError("not a decodable image")
        return cv2.cvtColor(img, cv2.COLOR_BGR2RGB)

    boxed = letterbox(rgb(frame), wide)[0]
    bare: dict[str, Step] = {}
    for backend, precision in variants:  # builds (and caches) the models the servers then load
        detector = wiring.load_detector(Settings(_env_file=None, backend=backend, precision=precision, **base))
        bare[variant_name(backend, precision)] = (lambda call: (lambda: (call(), 1)[1]))(
            detector.raw_call(to_batch([boxed])))
        if (backend, precision) == ("onnx", "fp32"):
            if not isinstance(detector, ShapeSet):
                raise TypeError(f"onnx fp32 with SHAPES should load as a ShapeSet, got {type(detector).__name__}")
            session = detector.member((primary, primary))

            def full_loop(session=session) -> int:
                session.infer(to_batch([letterbox(rgb(bus), primary)[0]]))
                return 1

            bare["full-decode loop"] = full_loop
    from ultralytics import YOLO

    yolo = YOLO(str(weights), task="detect")
    tmp = Path(tempfile.mkdtemp(prefix="campusguard-ratios-"))
    jpeg = tmp / "frame-1080p.jpg"
    jpeg.write_bytes(frame)
    bare["ultralytics"] = lambda: (yolo.predict(str(jpeg), imgsz=primary, verbose=False), 1)[1]
    if args.anchor:
        from app.tooling.bench.anchor import anchor_model, anchor_step, labelled_folder

        model = anchor_model(weights, wide, labelled_folder(args.images), cache, print)
        bare["anchor"] = anchor_step(model, jpeg, wide)
    servers, urls = {}, {}
    server_variants = [(b, p, t) for b, p in variants for t in args.server_threads or [threads]]
    for i, (backend, precision, t) in enumerate(server_variants):
        env = {f"CAMPUSGUARD_{k.upper()}": str(v) for k, v in base.items()} | {
            "CAMPUSGUARD_BACKEND": backend, "CAMPUSGUARD_PRECISION": precision, "CAMPUSGUARD_WARMUP_ITERS": "2",
            "CAMPUSGUARD_THREADS": str(t)}
        key = f"{variant_name(backend, precision)} t{t}"
        urls[key] = f"http://127.0.0.1:{args.port + i}"
        servers[key] = start_server(env, args.port + i, tmp / f"server-{backend}-{precision}-t{t}.log")
    try:
        for key, proc in servers.items():
            wait_ready(urls[key], proc)
        contestants: dict[str, Callable[[float], int]] = {}
        for backend, precision in variants:
            name = variant_name(backend, precision)
            for key in (k for k in urls if k.rsplit(" ", 1)[0] == name):
                contestants[f"server {key} 1080p"] = server_step(urls[key], frame, args.clients)
            contestants[f"bare model call {name} {format_imgsz(wide)} t{threads}"] = loop_step(bare[name])
        for key in (k for k in urls if k.startswith("onnx fp32 ")):
            contestants[f"server {key} bus.jpg"] = server_step(urls[key], bus, args.clients)
        if "full-decode loop" in bare:
            contestants[f"bare full-decode loop bus.jpg t{threads}"] = loop_step(bare["full-decode loop"])
        contestants["ultralytics predict 1080p"] = loop_step(bare["ultralytics"])
        if "anchor" in bare:
            contestants[f"anchor: ultralytics predict openvino int8 {format_imgsz(wide)} 1080p"] = \
                loop_step(bare["anchor"])
        result = measure(contestants, args.stage_seconds, args.rounds, threads)
        return result | {"shape": format_imgsz(wide), "variants": [variant_name(b, p) for b, p in variants],
                         "server_logs": {k: str(tmp / f"server-{k.replace(' ', '-')}.log") for k in urls}}
    finally:
        for proc in servers.values():
            proc.terminate()
            proc.wait(timeout=30)


# label -> (numerator prefix, numerator suffix, denominator prefix); one ratio per matching pair. {v}: a variant.
RATIOS = {
    "onnx fp32: server / bare model call (>= 0.90)": ("server onnx fp32 t", " 1080p", "bare model call onnx fp32"),
    "onnx int8: server / bare model call (>= 0.85)": ("server onnx int8 t", " 1080p", "bare model call onnx int8"),
    "openvino {p}: server / bare model call": ("server openvino {p} t", " 1080p", "bare model call openvino {p}"),
    "bus.jpg: onnx fp32 server / bare full-decode loop (>= 1.00)": ("server onnx fp32 t", " bus.jpg",
                                                                   "bare full-decode loop"),
    "{v} server / Ultralytics torch predict loop (onnx int8: >= 3)": ("server {v} t", " 1080p", "ultralytics predict"),
    "{v} server / the anchor, Ultralytics on its OpenVINO int8 (openvino int8: >= 1.25)": (
        "server {v} t", " 1080p", "anchor:"),
    "openvino bf16 server / onnx fp32 server (>= 1.6)": ("server openvino bf16 t", " 1080p", "server onnx fp32 t"),
}


def ratio_specs(rates: dict[str, list[float]]) -> list[tuple[str, str, str, str]]:
    """(label, numerator prefix, suffix, denominator prefix) for the contestants of this run."""
    variants = sorted({name.split(" t")[0].removeprefix("server ") for name in rates if name.startswith("server ")})
    out = []
    for label, (prefix, suffix, reference) in RATIOS.items():
        fills = [{"v": v, "p": v.split()[1]} for v in variants] if "{" in label else [{}]
        for fill in fills:
            if "{p}" in label and not fill["v"].startswith("openvino"):
                continue
            out.append((label.format(**fill), prefix.format(**fill), suffix, reference.format(**fill)))
    return out


def interleaved_rates(contestants: dict[str, Callable[[float], int]], seconds: float, rounds_n: int,
                      on_round: Callable[[int], None] = lambda r: None) -> dict[str, list[float]]:
    """Items/s of each contestant per round: ``seconds`` shared out over ``rounds_n`` rounds in
    which each runs once in turn (a noisy machine slows all of them alike), after one untimed slice
    each (connections, caches)."""
    share = seconds / rounds_n / len(contestants)
    rates: dict[str, list[float]] = {name: [] for name in contestants}
    for run in contestants.values():
        run(min(2.0, share))
    for r in range(rounds_n):
        on_round(r)
        for name, run in contestants.items():
            t0 = time.perf_counter()
            n = run(share)
            rates[name].append(n / (time.perf_counter() - t0))
    return rates


def measure(contestants: dict[str, Callable[[float], int]], seconds: float, rounds_n: int,
            threads: int) -> dict[str, Any]:
    rates = interleaved_rates(contestants, seconds, rounds_n)
    ratios, ranges = {}, {}
    for label, prefix, suffix, reference in ratio_specs(rates):
        ref = next((name for name in rates if name.startswith(reference) and name.endswith(
            suffix if reference.startswith("server ") else "")), None)
        if ref is None:
            continue
        for name in (n for n in rates if n.startswith(prefix) and n.endswith(suffix) and n != ref):
            server_threads = name[len(prefix):].split(" ")[0]
            per_round = np.array(rates[name]) / np.array(rates[ref])
            key = f"{label}, server {server_threads} thread(s) vs {threads}"
            ratios[key] = float(np.median(per_round))
            ranges[key] = [float(per_round.min()), float(per_round.max())]  # the noise to read the median against
    return {"img_s": {name: float(np.median(r)) for name, r in rates.items()}, "per_round": rates, "ratios": ratios,
            "ratio_ranges": ranges}
