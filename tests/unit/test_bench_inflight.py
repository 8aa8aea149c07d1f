"""`bench --stage inflight`: which servers a sweep asks for (the measuring itself is an integration test)."""

from app.inference.backends.onnx_inflight import auto_inflight
from app.tooling.bench.inflight import counts, server_counts, server_env
from app.cli import build_parser


def test_an_opt_in_count_that_won_the_sweep_is_measured_through_a_server_too():
    ort = {"variant": "onnx:fp32", "auto_count": auto_inflight(1), "vs_one": {"1": 1.0, "2": 1.25, "auto": 1.0}}
    assert server_counts(ort) == [("auto", 0), ("1", 1), ("2", 2)]


def test_no_extra_server_when_auto_is_the_fastest_or_one_wins():
    openvino = {"variant": "openvino:int8", "auto_count": 2, "vs_one": {"1": 1.0, "2": 1.6, "auto": 1.8}}
    slow = {"variant": "onnx:fp32", "auto_count": 1, "vs_one": {"1": 1.0, "2": 0.9, "auto": 1.0}}
    assert server_counts(openvino) == server_counts(slow) == [("auto", 0), ("1", 1)]


def test_the_sweep_runs_one_to_the_core_budget():
    assert counts(3) == [1, 2, 3] and counts(1) == [1]


def test_a_rectangular_shape_reaches_the_servers_as_the_settings_spell_it(tmp_path):
    """``--imgsz 384x640`` is a tuple in the arguments; the server reads HxW (it exited with
    "imgsz must be N or HxW, got '(384, 640)'" before)."""
    from app.config import Settings

    for given, spelled in (("384x640", "384x640"), ("640", "640")):
        args = build_parser().parse_args(["bench", "--stage", "inflight", "--imgsz", given, "--out", str(tmp_path)])
        env = server_env(args, "onnx", "fp32", 2)
        assert env["CAMPUSGUARD_IMGSZ"] == spelled and env["CAMPUSGUARD_REQUESTS_IN_FLIGHT"] == "2"
        assert Settings(_env_file=None, imgsz=env["CAMPUSGUARD_IMGSZ"]).imgsz == args.imgsz
