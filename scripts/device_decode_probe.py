"""Step 1 of the GPU node run: does this GPU decode at all, and how fast (no service code).

    python3 scripts/device_decode_probe.py --images .device/images --out probe.json [--seconds 3]

Why a separate probe: the service's device decode (CAMPUSGUARD_DECODE=device) can only be as
good as the decoders the machine exposes, and a lent GPU in a virtual machine may hide them.
So before any figure is taken this reports, in one JSON:

* ``engines``: what ``nvidia-smi -q`` says about the JPEG (NVJPG) and video (NVDEC) engines
  (their utilisation lines exist only where the driver exposes the engines), or amd-smi's
  name on an AMD host;
* ``ffmpeg``: ``ffmpeg -hwaccels`` (``cuda``, ``vaapi``), or that ffmpeg is not installed;
* ``torchvision``: whether ``torchvision.io.decode_jpeg(device="cuda")`` decodes a real
  1080p JPEG, and the first error when it does not;
* ``decode_stage``: 1920x1080 quality-90 JPEGs made from ``--images`` (as ``campusguard
  campus-load`` makes them) decoded for ``--seconds`` each way: one thread of OpenCV on the
  CPU (ms per frame), and torchvision on the GPU one at a time and in batches of 16 (frames/s,
  synchronised). These are the ceilings the service's decode can reach on this machine.

Standard library, numpy, OpenCV, torch and torchvision only: all are on the lent machine.
Exit 0 whenever the JSON was written; what failed is in it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

SIZE = (1920, 1080)
QUALITY = 90


def command(args: list[str], timeout: float = 20) -> dict:
    """One tool's output, or why it gave none."""
    if shutil.which(args[0]) is None:
        return {"available": False, "error": f"{args[0]} not installed"}
    try:
        proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"available": False, "error": str(exc)}
    return {"available": proc.returncode == 0, "output": (proc.stdout + proc.stderr).strip()[-4000:]}


def engines() -> dict:
    """NVJPG / NVDEC as nvidia-smi reports them: the utilisation section names Decoder and
    JPEG lines only where the driver exposes those engines to this machine."""
    smi = command(["nvidia-smi", "-q", "-d", "UTILIZATION"])
    if not smi["available"]:
        amd = command(["amd-smi", "static", "--asic"])
        return {"nvidia_smi": smi, "amd_smi": amd}
    lines = [line.strip() for line in smi["output"].splitlines()]
    found = {key: next((line for line in lines if line.startswith(key)), None) for key in ("Decoder", "JPEG", "OFA")}

    def exposed(line: str | None) -> bool:  # "Decoder : 0 %" is an engine; "N/A" or no line is none
        return line is not None and "N/A" not in line.partition(":")[2]

    name = command(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"])
    return {"nvidia_smi": {"available": True, "gpu": name.get("output")}, "nvdec": found["Decoder"],
            "nvjpg": found["JPEG"], "ofa": found["OFA"], "exposes_nvdec": exposed(found["Decoder"]),
            "exposes_nvjpg": exposed(found["JPEG"])}


def frames(images: Path, count: int) -> list[bytes]:
    import cv2

    out = []
    for path in sorted(images.glob("*.jpg"))[:count]:
        img = cv2.imread(str(path))
        if img is None:
            continue
        ok, buf = cv2.imencode(".jpg", cv2.resize(img, SIZE, interpolation=cv2.INTER_LINEAR),
                               [cv2.IMWRITE_JPEG_QUALITY, QUALITY])
        if ok:
            out.append(buf.tobytes())
    return out


def timed(step, seconds: float, per_call: int) -> dict:
    """Frames per second of ``step`` (one call decodes ``per_call`` frames) over ``seconds``."""
    step()  # warm-up: library load, first allocation
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        step()
        calls += 1
    fps = calls * per_call / elapsed
    return {"frames_per_s": round(fps, 1), "ms_per_frame": round(1e3 / fps, 3), "frames": calls * per_call}


def decode_stage(jpegs: list[bytes], seconds: float) -> dict:
    import cv2
    import numpy as np

    cv2.setNumThreads(1)
    arrays = [np.frombuffer(b, np.uint8) for b in jpegs]
    out: dict = {"frame": f"{SIZE[0]}x{SIZE[1]} q{QUALITY}",
                 "frame_bytes_mean": round(sum(map(len, jpegs)) / len(jpegs)),
                 "cpu_opencv_one_thread": timed(lambda: [cv2.imdecode(a, cv2.IMREAD_COLOR) for a in arrays[:4]],
                                                seconds, 4)}
    try:
        import torch
        import torchvision
        from torchvision.io import decode_jpeg

        out["torch"], out["torchvision"] = torch.__version__, torchvision.__version__
        if not torch.cuda.is_available():
            out["gpu"] = {"error": "torch sees no GPU"}
            return out
        tensors = [torch.frombuffer(bytearray(b), dtype=torch.uint8) for b in jpegs]
        first = decode_jpeg(tensors[0], device="cuda")
        torch.cuda.synchronize()
        out["gpu_decode_ok"] = list(first.shape) == [3, SIZE[1], SIZE[0]]

        def one() -> None:
            for t in tensors[:4]:
                decode_jpeg(t, device="cuda")
            torch.cuda.synchronize()

        batch = (tensors * (16 // len(tensors) + 1))[:16]

        def batched() -> None:
            decode_jpeg(batch, device="cuda")
            torch.cuda.synchronize()

        out["gpu_torchvision_single"] = timed(one, seconds, 4)
        out["gpu_torchvision_batch16"] = timed(batched, seconds, 16)
        out["gpu_name"] = torch.cuda.get_device_name(0)
    except Exception as exc:  # the probe reports what failed; it never stops the run
        out["gpu_decode_ok"] = False
        out["gpu_error"] = f"{type(exc).__name__}: {exc}"[:600]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=Path, default=Path(".device/images"))
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--seconds", type=float, default=3.0, help="per decode row")
    parser.add_argument("--frames", type=int, default=8, help="distinct 1080p frames made from --images")
    args = parser.parse_args(argv)
    report: dict = {"engines": engines(), "ffmpeg": command(["ffmpeg", "-hide_banner", "-hwaccels"])}
    jpegs = frames(args.images, args.frames)
    report["decode_stage"] = decode_stage(jpegs, args.seconds) if jpegs else {"error": f"no .jpg in {args.images}"}
    report["torchvision_device_decode"] = report["decode_stage"].get("gpu_decode_ok", False)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2))
    e, d = report["engines"], report["decode_stage"]
    print(f"probe: NVDEC exposed {e.get('exposes_nvdec')}, NVJPG exposed {e.get('exposes_nvjpg')}, "
          f"ffmpeg lists the cuda hwaccel {'cuda' in report['ffmpeg'].get('output', '')!s}, "
          f"torchvision decode_jpeg on the GPU {report['torchvision_device_decode']}")
    for key in ("cpu_opencv_one_thread", "gpu_torchvision_single", "gpu_torchvision_batch16"):
        if key in d:
            print(f"probe: {key}: {d[key]['frames_per_s']} frames/s ({d[key]['ms_per_frame']} ms/frame)")
    print(f"probe: wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
