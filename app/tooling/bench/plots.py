"""The bench table's three PNG plots (FPS, p99 latency, peak memory) by batch size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from app.tooling.bench import report


def plot(out: Path, rows: list[dict[str, Any]]) -> list[Path]:
    plt = report.pyplot()
    files = []
    series: dict[tuple, list[dict[str, Any]]] = {}
    for r in rows:
        if r["kind"] != "ultralytics":
            series.setdefault((r["size"], r["precision"], r["backend"], r["kind"]), []).append(r)
    ultra = {(r["size"], r["precision"]): r for r in rows if r["kind"] == "ultralytics"}
    sizes = sorted({r["size"] for r in rows}, key=lambda s: "nml".find(s))
    precisions = sorted({r["precision"] for r in rows})
    for metric, label, fname in (("fps", "images/s", "bench_fps.png"), ("lat_p99_ms", "p99 latency per call (ms)",
                                                                          "bench_latency.png"),
                                 ("peak_mem_mb", "peak memory (MB)", "bench_memory.png")):
        fig, axes = plt.subplots(len(precisions), len(sizes), figsize=(4.2 * len(sizes), 3.4 * len(precisions)),
                                 squeeze=False)
        for pi, precision in enumerate(precisions):
            for si, size in enumerate(sizes):
                ax = axes[pi][si]
                for (s, p, backend, kind), group in sorted(series.items()):
                    if s != size or p != precision:
                        continue
                    group = sorted(group, key=lambda r: r["batch"])
                    ax.plot([r["batch"] for r in group], [r[metric] or 0 for r in group], marker="o",
                            linestyle="-" if kind == "library" else "--", label=f"{backend} {kind}")
                if (size, precision) in ultra and metric != "lat_p99_ms":
                    ax.axhline(ultra[(size, precision)][metric] or 0, color="grey", linestyle=":",
                               label="Ultralytics predict loop")
                ax.set_title(f"yolov8{size} {precision}")
                ax.set_xlabel("batch")
                ax.set_ylabel(label)
                ax.set_xscale("log", base=2)
                batches = sorted({r["batch"] for r in rows if r["size"] == size})
                ax.set_xticks(batches, [str(b) for b in batches])
                ax.minorticks_off()
                ax.grid(alpha=0.3)
                ax.legend(fontsize=7)
        fig.tight_layout()
        report.save_png(fig, out / fname)
        plt.close(fig)
        files.append(out / fname)
    return files
