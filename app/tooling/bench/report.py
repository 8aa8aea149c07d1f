"""Writing a benchmark's results: JSON (everything), CSV and Markdown (the table), PNG.

Every command produces the same four kinds of file in its results folder, named after
the command: ``<name>.json``, ``<name>.csv``, ``<name>.md`` and ``<name>_*.png``.
"""

from __future__ import annotations

import csv
import json
import math
import os
import platform
import socket
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any


def environment() -> dict[str, Any]:
    """Where and with what the numbers were measured."""
    info: dict[str, Any] = {
        "time_utc": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
    }
    try:
        info["load_average"] = [round(x, 2) for x in os.getloadavg()]
    except OSError:
        pass
    for module in ("torch", "onnxruntime", "ultralytics", "numpy", "cv2"):
        try:
            info[module] = __import__(module).__version__
        except Exception:  # not installed here
            continue
    from importlib import metadata

    try:  # the installed version, without importing openvino ahead of its telemetry switch (openvino_ir.py)
        info["openvino"] = metadata.version("openvino")
    except metadata.PackageNotFoundError:
        pass
    return info


SECRET_OPTIONS = ("--api-key",)


def command_line(name: str, argv: Sequence[str]) -> str:
    """The command as a report shows it: the value of ``--api-key`` masked and every URL with its
    user info and query hidden (``redact_url``), since reports are committed to docs/ and shared."""
    from app.core.redact import MASK, redact_url

    shown: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            shown.append(MASK)
            hide_next = False
            continue
        option, eq, _ = arg.partition("=")
        if option in SECRET_OPTIONS:
            shown.append(f"{option}={MASK}" if eq else arg)
            hide_next = not eq
            continue
        shown.append(redact_url(arg) if "://" in arg else arg)
    return " ".join([f"campusguard {name}", *shown])


def _clean(value: Any) -> Any:
    """JSON has no NaN/inf: write them as null."""
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def fmt(value: Any, digits: int = 1) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        return f"{value:.{digits}f}"
    return str(value)


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[tuple[str, str, int]]) -> str:
    """``columns``: (key, header, decimals)."""
    head = "| " + " | ".join(h for _, h, _ in columns) + " |"
    rule = "|" + "|".join("---" for _ in columns) + "|"
    body = ["| " + " | ".join(fmt(row.get(k), d) for k, _, d in columns) + " |" for row in rows]
    return "\n".join([head, rule, *body]) + "\n"


def write_json(path: Path, payload: dict[str, Any]) -> Path:
    path.write_text(json.dumps(_clean(payload), indent=2) + "\n")
    return path


def write_csv(path: Path, rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> Path:
    with path.open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(columns), extrasaction="ignore")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if row.get(k) is None else (round(row[k], 4) if isinstance(row.get(k), float)
                                                                  else row[k])) for k in columns})
    return path


def write_markdown(path: Path, title: str, sections: Sequence[str]) -> Path:
    path.write_text(f"# {title}\n\n" + "\n".join(s.rstrip() + "\n" for s in sections))
    return path


def pyplot():
    """matplotlib with a file-only backend (no display here or on servers)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig, path: Path, dpi: int = 60) -> Path:
    """Save a figure as a small palette PNG (256 colours are plenty for line plots)."""
    import io

    from PIL import Image

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    buf.seek(0)
    with Image.open(buf) as img:
        img.convert("RGB").quantize(colors=256).save(path, optimize=True)
    return path
