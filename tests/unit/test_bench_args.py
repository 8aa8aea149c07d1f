"""Argument parsing of `campusguard bench`, `loadtest` and `soak`."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from app.tooling.bench import soak
from app.tooling.bench.plan import make_plan, total_steps
from app.commands import bench as command, loadtest
from app.commands import soak as soak_command
from app.cli import build_parser
from app.core.errors import ConfigError


def parse(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(list(argv))


def test_bench_defaults_follow_the_issue():
    args = parse("bench")
    assert args._run is command.run
    assert args.backends == ["torch", "onnx"]
    assert args.sizes == ["n", "m", "l"]
    assert args.batches == [1, 4, 8, 16]
    assert args.warmup == 10
    assert args.device == "cpu"
    assert args.references == ["ultralytics", "raw"]
    command.validate(args)
    assert args.precisions == ["fp32"]  # fp16 only on a GPU


def test_bench_options_and_plan():
    args = parse("bench", "--backends", "onnx", "--sizes", "n,l", "--batches", "2, 8", "--iterations", "3",
                 "--batches-for", "l=1,4", "--iterations-for", "l=2", "--weights", "n=/tmp/x.pt",
                 "--device", "cuda:0", "--out", "/tmp/r")
    command.validate(args)
    assert args.precisions == ["fp32", "fp16"]
    plans = make_plan(args)
    assert [(p.size, p.precision, p.batches, p.iterations, p.weights) for p in plans] == [
        ("n", "fp32", [2, 8], 3, "/tmp/x.pt"), ("n", "fp16", [2, 8], 3, "/tmp/x.pt"),
        ("l", "fp32", [1, 4], 2, "yolov8l.yaml"), ("l", "fp16", [1, 4], 2, "yolov8l.yaml")]
    assert args.out == Path("/tmp/r")
    # progress total: per plan, (warm-up + iterations) per reference + per backend x kind x batch
    assert total_steps(plans, args) == 2 * (13 + 2 * 2 * 13) + 2 * (12 + 2 * 2 * 12)


@pytest.mark.parametrize("argv", [
    ["--backends", "tensorrt"], ["--sizes", "x"], ["--batches", "0"], ["--batches", "a"], ["--batches", ""],
    ["--batches-for", "q=1"], ["--batches-for", "m"], ["--iterations-for", "m=0"], ["--weights", "m"],
    ["--precisions", "int4"], ["--references", "trt"],
])
def test_bench_rejects_bad_values(argv, capsys):
    with pytest.raises(SystemExit):
        parse("bench", *argv)


def test_bench_fp16_on_cpu_is_refused():
    args = parse("bench", "--precisions", "fp16")
    with pytest.raises(ConfigError, match="GPU"):
        command.validate(args)


def test_loadtest_defaults_and_modes():
    args = parse("loadtest")
    assert args._run is loadtest.run
    assert args.concurrency == [1, 2, 4, 8, 16, 32]
    assert args.images == Path("../shared/datasets/coco-val128/images")
    loadtest.validate(args)
    assert args.duration == 20.0 and args.requests is None
    args = parse("loadtest", "--requests", "50", "--concurrency", "4,16", "--url", "http://h:1", "--raw-body")
    loadtest.validate(args)
    assert (args.requests, args.duration, args.concurrency, args.url, args.raw_body) == (50, None, [4, 16], "http://h:1", True)
    with pytest.raises(SystemExit):
        parse("loadtest", "--requests", "5", "--duration", "3")  # one mode at a time
    with pytest.raises(ConfigError):
        loadtest.validate(parse("loadtest", "--requests", "0"))
    args = parse("loadtest", "--library-check", "5", "--baseline-batch", "4", "--threads", "1")
    loadtest.validate(args)
    assert (args.library_check, args.baseline_batch, args.threads) == (5, 4, 1)
    assert parse("loadtest").library_check == 0  # off unless asked for
    with pytest.raises(ConfigError):
        loadtest.validate(parse("loadtest", "--library-check", "-1"))


def test_soak_defaults():
    args = parse("soak")
    assert args._run is soak_command.run
    assert (args.requests, args.min_side, args.max_width, args.max_height) == (10_000, 64, 3840, 2160)
    soak_command.validate(args)
    with pytest.raises(ConfigError):
        soak_command.validate(parse("soak", "--min-side", "4000"))
    with pytest.raises(ConfigError):
        soak_command.validate(parse("soak", "--concurrency", "0"))


def test_soak_frame_sizes_cover_64_to_4k():
    sizes = soak.frame_sizes(24, 64, 3840, 2160, seed=1)
    assert len(sizes) == 24
    assert (64, 64) in sizes and (3840, 2160) in sizes
    assert all(64 <= w <= 3840 and 64 <= h <= 2160 for w, h in sizes)
    assert sizes == soak.frame_sizes(24, 64, 3840, 2160, seed=1)  # seeded
    assert soak.frame_sizes(2, 64, 3840, 2160, seed=1) == [(64, 64), (3840, 2160)]


def test_every_command_module_has_a_docstring():
    for module in (command, loadtest, soak):
        assert module.__doc__ and module.__doc__.strip()


def test_bench_skips_pairs_a_backend_does_not_run():
    """bf16 runs on openvino only, int8 on onnx and openvino, on the CPU (the service's table)."""
    from app.tooling.bench.plan import runs

    assert runs("openvino", "bf16", "cpu") and runs("onnx", "int8", "cpu") and runs("openvino", "int8", "cpu")
    assert not runs("onnx", "bf16", "cpu") and not runs("torch", "int8", "cpu") and not runs("openvino", "fp32", "cuda:0")
