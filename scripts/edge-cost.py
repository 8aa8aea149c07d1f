"""What the edge check (nginx auth_request -> GET /auth/check) costs per frame.

    .venv/bin/python scripts/edge-cost.py --frames 300 --out results/edge-cost.json

Starts a real `campusguard serve` (keys from deploy/scripts/init-secrets.sh) and the shipped
nginx config under the system's nginx (as tests/deploy renders it), then posts the same JPEG
with the camera key, interleaved: through nginx (auth_request + proxy) and to the service
directly, and times GET /auth/check alone. Prints a summary table and writes JSON (with the load average): the per-frame cost is
the median difference and the check's own latency.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def timed(client, method: str, url: str, **kwargs) -> float:
    start = time.perf_counter()
    r = client.request(method, url, **kwargs)
    elapsed = time.perf_counter() - start
    assert r.status_code in (200, 204), (url, r.status_code, r.text[:200])
    return elapsed * 1000


def main() -> None:
    import httpx
    from rich.console import Console
    from rich.table import Table
    from tqdm import tqdm

    from tests.conftest import WEIGHTS, start_server, ultralytics_asset
    from tests.deploy.nginx_util import REPLICAS, running_edge
    from tests.deploy.secrets_util import camera_key, init_secrets

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=300)
    ap.add_argument("--out", type=Path, default=Path("results/edge-cost.json"))
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="edge-cost-"))
    init_secrets(tmp / "secrets", tmp / "env")
    server = start_server(tmp, WEIGHTS, api_keys_file=str(tmp / "secrets/api-keys.yaml"))
    jpeg = ultralytics_asset("bus.jpg").read_bytes()
    headers = {"X-API-Key": camera_key(tmp / "secrets"), "content-type": "image/jpeg"}
    check = {"X-API-Key": headers["X-API-Key"], "X-Original-Method": "POST", "X-Original-URI": "/detect?camera_id=c1"}
    samples: dict[str, list[float]] = {"via nginx (edge check)": [], "direct": [], "GET /auth/check": []}
    try:
        with running_edge(tmp, [urlsplit(server.url).port] * REPLICAS) as edge, httpx.Client(timeout=60) as client:
            for _ in range(10):  # warm both paths
                timed(client, "POST", f"{edge.internal}/detect?camera_id=c1", content=jpeg, headers=headers)
            for _ in tqdm(range(args.frames), desc="frames"):
                samples["via nginx (edge check)"].append(
                    timed(client, "POST", f"{edge.internal}/detect?camera_id=c1", content=jpeg, headers=headers))
                samples["direct"].append(timed(client, "POST", f"{server.url}/detect?camera_id=c1", content=jpeg,
                                               headers=headers))
                samples["GET /auth/check"].append(timed(client, "GET", f"{server.url}/auth/check", headers=check))
    finally:
        server.proc.terminate()
        server.proc.wait(20)
    medians = {k: statistics.median(v) for k, v in samples.items()}
    result = {"frames": args.frames, "median_ms": medians,
              "p90_ms": {k: statistics.quantiles(v, n=10)[-1] for k, v in samples.items()},
              "edge_overhead_ms": medians["via nginx (edge check)"] - medians["direct"],
              "loadavg": os.getloadavg(), "cpus": os.cpu_count()}
    table = Table(title=f"edge check cost, {args.frames} frames (bus.jpg, imgsz 320, CPU)")
    for col in ("path", "median ms", "p90 ms"):
        table.add_column(col)
    for k in samples:
        table.add_row(k, f"{medians[k]:.2f}", f"{result['p90_ms'][k]:.2f}")
    table.add_row("nginx + edge check overhead", f"{result['edge_overhead_ms']:.2f}", "")
    Console().print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
