"""Dry runs apart from the detection path (issue 23 finding 3): one at a time (the next gets 429
with Retry-After), in a worker process of the idle scheduling class at nice 19, ended by the
kernel past its CPU time (422) and by the server past its time (503 with Retry-After)."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import pytest
import yaml

from app.core.timeutil import iso
from app.rules.service.dryrun import DryRunner, DryRunOptions
from tests.support.inprocess import inprocess_app
from tests.support.rules_util import at
from tests.support.replay import SITE, record
from tests.support.dry_runs import big_site

pytestmark = pytest.mark.timeout(300)
WINDOW = {"dry_run": "true", "since": iso(at(0)), "until": iso(at(3600))}
SCHED_IDLE = 5


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    svc, settings = record(tmp_path_factory.mktemp("dryruns"))
    settings = settings.model_copy(update={"max_body_bytes": 8 * 1024 * 1024})
    with inprocess_app(settings, ready=False, rules=svc) as ip:
        ip.rules, ip.url = svc, settings.events_db_url
        yield ip
    svc.stop()


def use(env, **options) -> DryRunner:
    """A runner with these options for the service (production defaults otherwise)."""
    env.rules.dry_runs.stop()
    env.rules.dry_runs = DryRunner(DryRunOptions(env.url, **options))
    return env.rules.dry_runs


def post(env, body: str, **params):
    return env.client.post("/admin/reload", params={**WINDOW, **params}, content=body,
                           headers={"content-type": "application/yaml"})


def in_background(fn):
    out: dict = {}
    thread = threading.Thread(target=lambda: out.setdefault("reply", fn()), daemon=True)
    thread.start()
    return thread, out


def wait_until(cond, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.01)


def proc_status(pid: int) -> tuple[int, int, str]:
    """(nice, scheduling policy, soft CPU-time limit) of a process, as the kernel has them."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    limits = next(line for line in Path(f"/proc/{pid}/limits").read_text().splitlines()
                  if line.startswith("Max cpu time"))
    return int(fields[16]), int(fields[38]), limits.split()[3]


@pytest.mark.slow  # a 1,500-camera site parsed by an idle-class worker: 7-9 s alone, 20-30 s in the suite
def test_one_at_a_time_in_the_idle_class_the_next_gets_429_with_retry_after(env):
    runner = use(env, cpu_s=60, timeout_s=240)
    thread, first = in_background(lambda: post(env, big_site(1500)))
    wait_until(lambda: runner._lock.locked() and runner.pid is not None)
    second = post(env, yaml.safe_dump(SITE))
    assert second.status_code == 429 and second.json()["error"] == "dry_run_in_progress", second.text
    assert 1 <= int(second.headers["retry-after"]) <= 10
    # the worker as the kernel sees it: idle class, nice 19, a CPU-time limit (set once the request arrived)
    wait_until(lambda: runner.pid is None or proc_status(runner.pid)[2] != "unlimited")
    nice, policy, cpu_limit = proc_status(runner.pid)
    assert (nice, policy) == (19, SCHED_IDLE) and 60 <= int(cpu_limit) <= 70, (nice, policy, cpu_limit)
    thread.join(240)
    assert first["reply"].status_code == 422 and first["reply"].json()["error"] == "empty_window"  # none of them logged
    again = post(env, yaml.safe_dump(SITE))  # free again; the worker stayed up for it
    assert again.status_code == 200 and again.json()["totals"]["matched"] == 3


def test_a_dry_run_past_its_cpu_time_is_ended_by_the_kernel_with_422(env):
    runner = use(env, cpu_s=1, idle=False, timeout_s=240)  # the normal class: the CPU limit is the point here
    r = post(env, big_site(3000))  # about 3 s of CPU to parse
    assert r.status_code == 422 and r.json()["error"] == "dry_run_too_long", r.text
    assert "1 s of CPU" in r.json()["message"] and runner.pid is None
    runner.options = dataclasses.replace(runner.options, cpu_s=60)  # (1 s would not cover the tracker's imports)
    assert post(env, yaml.safe_dump(SITE)).status_code == 200  # the same runner starts a new worker for the next one


def test_a_dry_run_past_its_time_is_ended_with_503_and_retry_after(env):
    runner = use(env, timeout_s=0.5)
    r = post(env, big_site(3000))
    assert r.status_code == 503 and r.json()["error"] == "dry_run_timeout", r.text
    assert int(r.headers["retry-after"]) >= 1 and runner.pid is None  # the worker was stopped
    use(env, idle=False, timeout_s=240)
    assert post(env, yaml.safe_dump(SITE)).status_code == 200


def test_the_worker_reads_either_store(db_url, tmp_path):
    """The worker opens the event store itself: the same comparison from SQLite and PostgreSQL."""
    svc, settings = record(tmp_path, db_url)
    svc.dry_runs = DryRunner(DryRunOptions(db_url, idle=False, timeout_s=240))
    try:
        with inprocess_app(settings, ready=False, rules=svc) as ip:
            r = ip.client.post("/admin/reload", params=WINDOW, content=yaml.safe_dump(SITE),
                               headers={"content-type": "application/yaml"})
        assert r.status_code == 200, r.text
        assert r.json()["frames"] == 100 and r.json()["totals"]["matched"] == 3
    finally:
        svc.stop()


@pytest.mark.slow  # waits out the worker's idle time, then starts a new one: 9 s alone, over 20 s in the suite
def test_the_worker_leaves_when_idle_and_comes_back(env):
    runner = use(env, idle=False, idle_s=3, timeout_s=240)
    assert post(env, yaml.safe_dump(SITE)).status_code == 200
    pid = runner.pid
    assert pid is not None
    wait_until(lambda: not Path(f"/proc/{pid}").exists() or "Z" in Path(f"/proc/{pid}/stat").read_text().split()[2],
               timeout=60)
    assert post(env, yaml.safe_dump(SITE)).status_code == 200 and runner.pid not in (None, pid)
