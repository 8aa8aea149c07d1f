"""Where a server's time goes at load: py-spy samples of a real `campusguard serve` under 4
concurrent clients posting a 1080p camera-like JPEG, folded into the service's stages.

    .venv/bin/python scripts/profile-server.py --seconds 20 --out results/profile [ENV=VALUE ...]

Needs py-spy (`pip install py-spy`; the dev extra has it). Every sampled stack of every
thread is given to the first stage whose marker it contains, innermost frame first (decode,
letterbox, inference, NMS, ...); idle threads (waiting on a queue, a lock, the selector) are
counted apart. Prints the table, the server's own stage timings from /metrics, and writes
JSON (with the load average) to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STAGES = [  # (stage, markers in a frame's "function (file)"), innermost frame first
    ("decode", ("imdecode", "decode_pixels", "decode_image", "read_header", "probe (")),
    ("letterbox", ("letterbox", "copyMakeBorder")),
    ("batch write (uint8->float)", ("to_batch",)),
    ("inference", ("session.run", "run (onnxruntime", "_run (app/inference/backends", "forward")),
    ("NMS / postprocess", ("postprocess", "compact", "nms (", "greedy_keep", "to_detections", "finish (")),
    ("rules", ("app/rules",)),
    ("JSON / response model", ("serialize_response", "jsonable_encoder", "json", "pydantic", "shape_result", "render")),
    ("multipart / upload", ("multipart", "parse_upload", "formparsers", "read_upload")),
]
GENERIC = [  # only when no stage above matched any frame of the stack
    ("HTTP (uvicorn, starlette, fastapi)", ("uvicorn", "h11", "httptools", "starlette", "fastapi")),
    ("engine / asyncio / executor hand-offs", ("asyncio", "engine.py", "batching.py", "concurrent/futures", "prometheus")),
]
IDLE = ("wait (threading", "_wait_for_tstate_lock", "select (", "epoll", "get (queue", "_worker (concurrent",
        "sleep", "acquire")


def classify(stack: str) -> str:
    frames = stack.split(";")
    innermost = frames[-1]
    if any(m in innermost for m in IDLE):
        return "idle (waiting)"
    for table in (STAGES, GENERIC):
        for frame in reversed(frames):
            for stage, markers in table:
                if any(m in frame for m in markers):
                    return stage
    return "other"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--port", type=int, default=18310)
    parser.add_argument("--out", type=Path, default=Path("results/profile"))
    parser.add_argument("--tree", type=Path, default=ROOT, help="the checkout whose server is profiled (default: this one)")
    parser.add_argument("env", nargs="*", help="CAMPUSGUARD_X=VALUE settings of the server (prefix optional)")
    args = parser.parse_args()
    import httpx

    from app.inference.vision.decode import image_files
    from app.tooling.bench.camera_frames import camera_jpegs

    frame = camera_jpegs(image_files(ROOT.parent / "shared/datasets/coco-val128/images"), (1920, 1080), count=1)[0]
    args.out = args.out.resolve()
    env = os.environ | {"CAMPUSGUARD_HOST": "127.0.0.1", "CAMPUSGUARD_PORT": str(args.port), "CAMPUSGUARD_API_KEYS": "",
                        "CAMPUSGUARD_LOG_LEVEL": "WARNING", "YOLO_OFFLINE": "1"}
    for item in args.env:
        key, _, value = item.partition("=")
        env[key if key.startswith("CAMPUSGUARD_") else f"CAMPUSGUARD_{key}"] = value
    args.out.mkdir(parents=True, exist_ok=True)
    env["CAMPUSGUARD_WEIGHTS"] = env.get("CAMPUSGUARD_WEIGHTS", str((ROOT.parent / "shared/models/yolov8n.pt").resolve()))
    server = subprocess.Popen([sys.executable, "-m", "app.cli", "serve"], env=env, cwd=args.tree.resolve(),
                              stdout=(args.out / "server.log").open("wb"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{args.port}"
    try:
        deadline = time.monotonic() + 600
        while True:
            try:
                if httpx.get(f"{url}/health/ready", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise SystemExit("server did not become ready")
            time.sleep(1)
        stop = time.monotonic() + args.seconds + 4
        count = [0]

        def client() -> None:
            with httpx.Client(base_url=url, timeout=60) as http:
                while time.monotonic() < stop:
                    http.post("/detect", content=frame, headers={"Content-Type": "image/jpeg"}).raise_for_status()
                    count[0] += 1

        before = httpx.get(f"{url}/metrics").text
        threads = [threading.Thread(target=client) for _ in range(args.clients)]
        for t in threads:
            t.start()
        time.sleep(2)
        raw = args.out / "py-spy.txt"
        subprocess.run([str(Path(sys.executable).parent / "py-spy"), "record", "--pid", str(server.pid), "--duration",
                        str(int(args.seconds)), "--rate", "100", "--format", "raw", "--threads", "--nonblocking",
                        "--output", str(raw)], check=True, capture_output=True)
        for t in threads:
            t.join()
        after = httpx.get(f"{url}/metrics").text
    finally:
        server.terminate()
        server.wait(timeout=30)
    samples: Counter[str] = Counter()
    for line in raw.read_text().splitlines():
        stack, _, n = line.rpartition(" ")
        samples[classify(stack)] += int(n)
    busy = sum(n for stage, n in samples.items() if stage != "idle (waiting)")
    stage_ms = stage_timings(before, after)
    result = {"load_average": os.getloadavg(), "requests": count[0], "seconds": args.seconds, "env": args.env,
              "cpu_samples_share": {k: round(v / busy, 3) for k, v in samples.most_common() if k != "idle (waiting)"},
              "idle_samples": samples["idle (waiting)"], "server_stage_ms_per_image": stage_ms}
    (args.out / "profile.json").write_text(json.dumps(result, indent=2))
    print(f"{count[0]} requests in ~{args.seconds + 6:.0f} s; load average {os.getloadavg()}")
    print("| stage (py-spy, share of busy samples) | share |\n|---|---|")
    for stage, share in result["cpu_samples_share"].items():
        print(f"| {stage} | {share:.1%} |")
    print("\n| stage (server's own timings, mean ms per image) | ms |\n|---|---|")
    for stage, ms in stage_ms.items():
        print(f"| {stage} | {ms:.1f} |")
    return 0


def stage_timings(before: str, after: str) -> dict[str, float]:
    """Mean of campusguard_stage_duration_seconds per stage over the profiled window."""
    def read(text: str) -> dict[str, tuple[float, float]]:
        out: dict[str, list[float]] = {}
        for line in text.splitlines():
            for kind in ("sum", "count"):
                prefix = f"campusguard_stage_duration_seconds_{kind}{{stage=\""
                if line.startswith(prefix):
                    stage = line[len(prefix):].split('"')[0]
                    out.setdefault(stage, [0.0, 0.0])[0 if kind == "sum" else 1] = float(line.rsplit(" ", 1)[1])
        return {k: (v[0], v[1]) for k, v in out.items()}

    a, b = read(before), read(after)
    return {stage: 1e3 * (b[stage][0] - a.get(stage, (0, 0))[0]) / max(1.0, b[stage][1] - a.get(stage, (0, 0))[1])
            for stage in b}


if __name__ == "__main__":
    sys.exit(main())
