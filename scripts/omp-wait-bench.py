#!/usr/bin/env python3
"""OpenMP spinning on shared cores (docs/deploy.md, "CPU threads"): torch at imgsz 320, a
request every 20 ms, one process alone and two at once, with OMP_WAIT_POLICY unset (spinning)
and PASSIVE, in interleaved rounds. Prints a table and writes JSON.

    .venv/bin/python scripts/omp-wait-bench.py [--weights W] [--rounds 2] [--out results/omp-wait.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

REQUESTS, GAP_S, THREADS, IMGSZ = 60, 0.02, 2, 320


def worker(weights: str) -> None:
    """One process: warm up, then REQUESTS inferences with a gap; prints its CPU and wall seconds."""
    import torch
    from ultralytics import YOLO

    torch.set_num_threads(THREADS)
    model = YOLO(weights).model.eval()
    x = torch.zeros(1, 3, IMGSZ, IMGSZ)
    with torch.inference_mode():
        for _ in range(3):
            model(x)
        r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
        for _ in range(REQUESTS):
            model(x)
            time.sleep(GAP_S)
        r1, t1 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    print(json.dumps({"cpu_s": round(cpu, 3), "wall_s": round(t1 - t0, 3)}))


def run(weights: str, policy: str | None, processes: int) -> list[dict]:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"} | {"YOLO_OFFLINE": "1"}
    if policy:
        env["OMP_WAIT_POLICY"] = policy
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", "--weights", weights], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True) for _ in range(processes)]
    return [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in procs]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--weights", default=str(Path(__file__).resolve().parents[2] / "shared/models/yolov8n.pt"))
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=Path("results/omp-wait.json"))
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args.weights)
        return 0
    rows = []
    for round_ in range(args.rounds):  # interleaved: each configuration once per round
        for processes in (1, 2):
            for policy in (None, "PASSIVE"):
                for i, result in enumerate(run(args.weights, policy, processes)):
                    rows.append({"round": round_, "processes": processes, "policy": policy or "default (spin)",
                                 "process": i, **result})
    table = Table(title=f"torch {IMGSZ}px, {THREADS} threads, {REQUESTS} requests {GAP_S * 1e3:.0f} ms apart "
                        f"({os.cpu_count()} cores)")
    for col in ("processes at once", "OMP_WAIT_POLICY", "CPU s per process", "wall s per process"):
        table.add_column(col)
    for processes in (1, 2):
        for policy in ("default (spin)", "PASSIVE"):
            sel = [r for r in rows if r["processes"] == processes and r["policy"] == policy]
            table.add_row(str(processes), policy, f"{min(r['cpu_s'] for r in sel):.2f}–{max(r['cpu_s'] for r in sel):.2f}",
                          f"{min(r['wall_s'] for r in sel):.2f}–{max(r['wall_s'] for r in sel):.2f}")
    Console().print(table)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"host": platform.node(), "cpus": os.cpu_count(), "load_average": os.getloadavg(),
                                    "requests": REQUESTS, "gap_s": GAP_S, "threads": THREADS, "imgsz": IMGSZ,
                                    "rows": rows}, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
