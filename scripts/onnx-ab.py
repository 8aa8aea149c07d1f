"""Interleaved timing of ONNX models: iteration i runs each model once, in turn.

On a shared host a burst of load then hits every model alike, so their ratio holds up
where `campusguard bench` (one model after the other) drifts with the load. Reports wall
images/s (as the service sees them) and CPU time per image of the calling process
(--threads 1 makes that the model's own compute, untouched by other processes).

    python scripts/onnx-ab.py --threads 2 --iterations 40 fp32.onnx int8.onnx
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import onnxruntime as ort


def session(path: str, threads: int) -> ort.InferenceSession:
    opts = ort.SessionOptions()  # as the service's onnx backend sets them
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.intra_op_num_threads, opts.inter_op_num_threads = threads, 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.log_severity_level = 3
    return ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="the first is the reference")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    args = parser.parse_args()
    sessions = {path: session(path, args.threads) for path in args.models}
    wall: dict[str, list[float]] = {path: [] for path in args.models}
    cpu: dict[str, list[float]] = {path: [] for path in args.models}
    for i in range(args.warmup + args.iterations):
        for path, sess in sessions.items():
            inp = sess.get_inputs()[0]
            h, w = inp.shape[2], inp.shape[3]
            x = np.random.default_rng(i).random((args.batch, 3, h, w), dtype=np.float32)
            t0, c0 = time.perf_counter(), time.process_time()
            sess.run(None, {inp.name: x})
            if i >= args.warmup:
                wall[path].append((time.perf_counter() - t0) / args.batch)
                cpu[path].append((time.process_time() - c0) / args.batch)
    ref_wall, ref_cpu = np.median(wall[args.models[0]]), np.median(cpu[args.models[0]])
    print(f"{'img/s':>7} {'x wall':>7} {'cpu ms':>7} {'x cpu':>6}  model (medians of {args.iterations}, "
          f"{args.threads} threads, batch {args.batch})")
    for path in args.models:
        mw, mc = np.median(wall[path]), np.median(cpu[path])
        print(f"{1 / mw:7.1f} {ref_wall / mw:7.2f} {mc * 1e3:7.1f} {ref_cpu / mc:6.2f}  {path}")


if __name__ == "__main__":
    main()
