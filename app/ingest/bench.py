"""CPU cost of camera ingest per stream: what one core feeds.

    python -m app.ingest.bench [--seconds 20] [--json results/ingest-bench.json] [--image photo.jpg]

Runs the real reader (Supervisor -> ffmpeg -> framing -> one-slot sender) on one stream at
a time and measures CPU seconds per second of stream: ffmpeg's (decode, sample, scale,
encode) and this process's (reading, framing, colour conversion). The sources are made
first, like a camera's two streams: a 1080p H.264 main stream (4 Mbit/s) and a 640x360
sub-stream (512 kbit/s), both 15 fps with a key frame every second, from a photo panned
with sensor noise (a still image would encode to nothing and decode for free). They are
read as ``file://`` sources, which ffmpeg paces in real time like a live camera.

Rows: the main stream sampled to 1, 2 and 5 fps with full decode; key frames only
(``input_args: [-skip_frame, nokey]``) at 1 fps; the sub-stream at 1, 2 and 5 fps; and the
embedded path's raw output (RGB) against JPEG at 5 fps.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil

from app.ingest.frames import Frame, FrameFormat
from app.ingest.mailbox import SinkResult
from app.ingest.source import SourceSpec
from app.ingest.supervisor import Supervisor

CACHE = Path(".cache/campusguard/ingest-bench")
KEY_FRAMES_ONLY = ("-skip_frame", "nokey")


@dataclass(frozen=True)
class Case:
    name: str
    stream: str  # "main" | "sub"
    fps: float
    input_args: tuple[str, ...] = ()
    output: FrameFormat = FrameFormat.JPEG


CASES = [
    Case("main 1080p, full decode", "main", 1), Case("main 1080p, full decode", "main", 2),
    Case("main 1080p, full decode", "main", 5), Case("main 1080p, key frames only", "main", 1, KEY_FRAMES_ONLY),
    Case("sub 640x360, full decode", "sub", 1), Case("sub 640x360, full decode", "sub", 2),
    Case("sub 640x360, full decode", "sub", 5),
    Case("main 1080p, full decode, RGB out (embedded)", "main", 5, output=FrameFormat.RGB),
]


@dataclass
class Row:
    case: str
    stream: str
    source: str
    fps: float
    output: str
    seconds: float
    frames: int
    ffmpeg_cpu: float  # CPU seconds per stream second
    python_cpu: float
    total_cpu: float
    streams_per_core: float


def default_image() -> Path:
    import ultralytics

    return Path(ultralytics.__file__).parent / "assets" / "bus.jpg"


def make_source(image: Path, out: Path, width: int, height: int, bitrate: str, seconds: int = 20) -> Path:
    """An H.264 camera-like stream: the photo panned slowly, with temporal noise, 15 fps, GOP 15."""
    if out.is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    vf = (f"scale={width * 5 // 4}:{height * 5 // 4},crop={width}:{height}:'(iw-ow)*t/{seconds}':'(ih-oh)/2',"
          "noise=alls=6:allf=t,format=yuv420p")
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin", "-y", "-loop", "1",
                    "-framerate", "15", "-i", str(image), "-t", str(seconds), "-vf", vf, "-c:v", "libx264",
                    "-preset", "veryfast", "-b:v", bitrate, "-maxrate", bitrate, "-bufsize", bitrate, "-g", "15",
                    "-keyint_min", "15", "-bf", "0", "-an", str(out) + ".part.mp4"], check=True)
    Path(str(out) + ".part.mp4").rename(out)
    return out


class _Counter:
    def __init__(self) -> None:
        self.frames = 0

    def __call__(self, _camera_id: str):
        def sink(frame: Frame) -> SinkResult:
            self.frames += 1
            return SinkResult.sent()
        return sink


def measure(case: Case, source: Path, seconds: float, tick=lambda: None) -> Row:
    """Run one camera on ``source`` for ``seconds`` after it streams; CPU per stream second."""
    counter = _Counter()
    supervisor = Supervisor(counter, output=case.output)
    spec = SourceSpec(url=f"file://{source.resolve()}", fps=case.fps, input_args=case.input_args)
    supervisor.start({"bench": spec})
    try:
        deadline = time.monotonic() + 30
        while supervisor.states()["bench"].state.value != "streaming" or not supervisor.pids()["bench"]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"{case.name}: no frames ({supervisor.states()['bench'].last_error})")
            time.sleep(0.1)
        time.sleep(2)  # past ffmpeg's start-up (probing, the connect burst)
        ffmpeg = psutil.Process(supervisor.pids()["bench"])
        me = psutil.Process()
        f0, p0, n0, t0 = sum(ffmpeg.cpu_times()[:2]), sum(me.cpu_times()[:2]), counter.frames, time.monotonic()
        while time.monotonic() - t0 < seconds:
            time.sleep(0.5)
            tick()
        f1, p1, n1, t1 = sum(ffmpeg.cpu_times()[:2]), sum(me.cpu_times()[:2]), counter.frames, time.monotonic()
    finally:
        supervisor.stop()
    wall = t1 - t0
    ff, py = (f1 - f0) / wall, (p1 - p0) / wall
    return Row(case.name, case.stream, source.name, case.fps, case.output.value, round(wall, 1), n1 - n0,
               round(ff, 4), round(py, 4), round(ff + py, 4), round(1 / (ff + py), 1) if ff + py > 0 else 0.0)


def main(argv: list[str] | None = None) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeRemainingColumn
    from rich.table import Table

    parser = argparse.ArgumentParser(prog="python -m app.ingest.bench", description=__doc__.strip().splitlines()[0])
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds per row (after start-up)")
    parser.add_argument("--image", type=Path, default=None, help="photo the sources are made from (default: bus.jpg)")
    parser.add_argument("--workdir", type=Path, default=CACHE, help="where the generated sources are kept")
    parser.add_argument("--json", type=Path, default=Path("results/ingest-bench.json"))
    parser.add_argument("--only", default=None, help="run the rows whose name contains this text")
    args = parser.parse_args(argv)
    console = Console(stderr=True)
    image = args.image or default_image()
    cases = [c for c in CASES if not args.only or args.only in c.name]
    console.print(f"making the sources (once; kept in {args.workdir})")
    made = {"main": lambda: make_source(image, args.workdir / "main-1080p15.mp4", 1920, 1080, "4M"),
            "sub": lambda: make_source(image, args.workdir / "sub-640x360p15.mp4", 640, 360, "512k")}
    sources = {stream: made[stream]() for stream in {c.stream for c in cases}}
    rows: list[Row] = []
    with Progress(TextColumn("{task.description}"), BarColumn(), TimeRemainingColumn(), console=console,
                  auto_refresh=False) as progress:  # refreshed by hand: a render thread would add CPU to the rows
        task = progress.add_task("ingest bench", total=len(cases) * args.seconds)

        def tick() -> None:
            progress.advance(task, 0.5)
            progress.refresh()

        for case in cases:
            progress.update(task, description=f"{case.name} @ {case.fps:g} fps, {case.output.value}")
            progress.refresh()
            rows.append(measure(case, sources[case.stream], args.seconds,
                                tick=tick))
    table = Table(title="Camera ingest: CPU per stream (1 = one core)")
    for column in ("case", "fps out", "output", "frames", "ffmpeg CPU", "python CPU", "total", "streams/core"):
        table.add_column(column, justify="left" if column == "case" else "right")
    for r in rows:
        table.add_row(r.case, f"{r.fps:g}", r.output, str(r.frames), f"{r.ffmpeg_cpu:.3f}", f"{r.python_cpu:.3f}",
                      f"{r.total_cpu:.3f}", f"{r.streams_per_core:g}")
    Console(width=None if sys.stdout.isatty() else 130).print(table)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"seconds": args.seconds, "cpu_count": psutil.cpu_count(),
                                     "rows": [asdict(r) for r in rows]}, indent=2))
    console.print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
