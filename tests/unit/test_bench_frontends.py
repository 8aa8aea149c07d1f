"""`bench-frontends`' parts: the instant backend answers every batch from one real forward, and
the server's CPU read from /metrics counts the front ends' processes too."""

from __future__ import annotations

import numpy as np

from app.commands.bench_frontends import summarize
from app.tooling.bench.campus import server_cpu_seconds
from app.tooling.bench.instant import InstantDetector


class Counting:
    names = {0: "person"}

    def __init__(self) -> None:
        self.calls = 0

    def infer(self, batch: np.ndarray) -> np.ndarray:
        self.calls += 1
        return np.full((batch.shape[0], 84, 10), float(self.calls), np.float32)

    def candidates(self, batch, floor):  # the device-side filter: the instant detector must hide it
        raise AssertionError("not through the instant detector")


def test_the_instant_backend_runs_one_forward_per_input_shape() -> None:
    inner = Counting()
    fake = InstantDetector(inner)
    for n in (1, 4, 16, 4):
        out = fake.infer(np.zeros((n, 3, 32, 32), np.float32))
        assert out.shape == (n, 84, 10) and np.all(out == 1.0)
    fake.infer(np.zeros((2, 3, 64, 32), np.float32))
    assert inner.calls == 2
    assert fake.names == {0: "person"} and not hasattr(fake, "candidates")


def test_the_servers_cpu_counts_its_front_ends() -> None:
    one = "campusguard_process_cpu_seconds_total 2.5\n"
    assert server_cpu_seconds(one) == 2.5
    assert server_cpu_seconds(one + "campusguard_frontend_cpu_seconds_total 1.25\n") == 3.75
    assert server_cpu_seconds("campusguard_requests_total 3\n") is None


def test_the_summary_is_the_median_per_count() -> None:
    runs = [{"frontends": n, "round": r, "answered": 10, "answered_fps": 10.0, "failed": 0, "refused": 0,
             "lat_p50_ms": 1.0, "lat_p95_ms": 2.0, "server_cpu_s": 1.0, "server_cpu_ms_per_frame": cpu,
             "owner_cpu_ms_per_frame": cpu, "frontends_cpu_ms_per_frame": 0.0,
             "generator_cpu_ms_per_frame": 0.3}
            for n, r, cpu in ((1, 1, 3.0), (2, 1, 9.0), (1, 2, 5.0), (2, 2, 4.0), (1, 3, 4.0), (2, 3, 4.5))]
    rows = summarize(runs, [1, 2])
    assert [(r["frontends"], r["server_cpu_ms_per_frame"], r["runs"]) for r in rows] == [(1, 4.0, 3), (2, 4.5, 3)]


def test_the_device_calls_front_end_row_fits_5_minutes_and_is_a_known_setting(tmp_path) -> None:
    """docs/benchmarks.md's call with CAMPUSGUARD_FRONTENDS=4 as a third server row: the dry run
    plans it within 300 s and does not skip the row as an unknown setting."""
    import re

    from tests.support.device_scripts import node_dry_run

    proc = node_dry_run(tmp_path, CAMPUS_S="20", CAMPUS_BUDGET_S="60", SETTINGS=(
        "baseline:CAMPUSGUARD_DECODE=cpu device:CAMPUSGUARD_DECODE=device "
        "frontends4:CAMPUSGUARD_DECODE=device,CAMPUSGUARD_FRONTENDS=4"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[frontends4: CAMPUSGUARD_DECODE=device CAMPUSGUARD_FRONTENDS=4]" in proc.stdout
    assert "skipped" not in proc.stderr
    assert int(re.search(r"total\s+(\d+)s of 300s", proc.stdout).group(1)) <= 300
