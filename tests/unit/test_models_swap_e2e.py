"""Issue 41 part 3 end to end: a real server (uvicorn, torch at 320 px, no warm-up) serving the
shared yolov8n while 3 keep-alive http.client clients post frames; the weights behind its name
are replaced by a copy whose class names differ (``person`` -> ``student``) in the middle:
no request fails, and the replies after the switch carry the new class names."""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
import time
from pathlib import Path

import httpx

from app.config import Settings
from tests.support.models import renamed_copy, renamed_onnx
from tests.support.net import ready_server
from tests.support.threads import thread_nice


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def client_loop(port: int, frame: bytes, stop: threading.Event, out: list) -> None:
    """Post ``frame`` on one keep-alive connection until ``stop``: (finished at, status, labels)."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    while not stop.is_set():
        conn.request("POST", "/detect", body=frame, headers={"Content-Type": "image/jpeg"})
        reply = conn.getresponse()
        body = reply.read()
        names = {d["class_name"] for d in json.loads(body)["detections"]} if reply.status == 200 else set()
        out.append((time.monotonic(), reply.status, names))
    conn.close()


def test_a_swap_under_load_fails_no_request_and_moves_to_the_new_classes(tmp_path: Path, weights: Path):
    from ultralytics.utils import ASSETS

    from app.main import create_app

    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "yolov8n.pt").write_bytes(weights.read_bytes())
    renamed_copy(weights, folder / "campus.pt", {0: "student"})
    settings = Settings(_env_file=None, weights=folder / "yolov8n.pt", backend="torch", precision="fp32", imgsz=320,
                        warmup_iters=0, threads=2, preprocess_workers=1, ingest="off", data_dir=tmp_path,
                        snapshot_dir=tmp_path / "snapshots", fleet_interval_s=0)
    with ready_server(create_app(settings), "swap-e2e-server") as url:
        port = int(url.rsplit(":", 1)[1])
        frame = (Path(ASSETS) / "bus.jpg").read_bytes()
        stop, results = threading.Event(), [[] for _ in range(3)]
        clients = [threading.Thread(target=client_loop, args=(port, frame, stop, out)) for out in results]
        for client in clients:
            client.start()
        time.sleep(2)
        swap = httpx.put(f"{url}/admin/models/yolov8n", json={"weights": "campus.pt"}, timeout=120)
        switched = time.monotonic()
        assert swap.status_code == 200, swap.text
        time.sleep(2)
        stop.set()
        for client in clients:
            client.join(60)
        replies = [r for out in results for r in out]
        assert replies and all(status == 200 for _, status, _ in replies), {s for _, s, _ in replies}
        before = [names for at, _, names in replies if at < switched - 5]
        after = [names for at, _, names in replies if at > switched + 0.5]
        assert after and all("student" in names and "person" not in names for names in after)
        assert all("student" not in names for names in before)
        listed = httpx.get(f"{url}/models").json()["models"][0]
        assert listed["weights"] == "campus.pt" and "student" in listed["classes"]


def test_what_serves_after_a_swap_runs_at_the_usual_priority(tmp_path: Path, weights: Path, monkeypatch):
    """The swap provisions the new weights beside the serving model at nice +10, but the threads
    the new model serves with (the engine's workers, and ONNX Runtime's intra-op pool, made with
    the session) must not inherit that value for good: after the swap no thread made since runs
    above nice 0, and the new model answers."""
    from ultralytics.utils import ASSETS

    import app.wiring.runtime as runtime
    from app.inference.export import export_onnx
    from app.main import create_app

    provisioned_at: list[int] = []
    provision = runtime.provision_served

    def watched(*args, **kwargs):
        provisioned_at.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
        return provision(*args, **kwargs)

    folder = tmp_path / "models"
    folder.mkdir()
    served = export_onnx(weights, folder / "yolov8n.onnx", imgsz=320, dynamic_batch=True, threads=2)
    renamed_onnx(served, folder / "campus.onnx", {0: "student"})
    settings = Settings(_env_file=None, weights=served, backend="onnx", precision="fp32", imgsz=320, warmup_iters=0,
                        threads=2, preprocess_workers=1, ingest="off", data_dir=tmp_path,
                        snapshot_dir=tmp_path / "snapshots", fleet_interval_s=0, onnx_cache_dir=tmp_path / "cache")
    with ready_server(create_app(settings), "swap-priority-server") as url:
        monkeypatch.setattr(runtime, "provision_served", watched)  # the swap's, not the start's
        before = set(thread_nice())
        swap = httpx.put(f"{url}/admin/models/yolov8n", json={"weights": "campus.onnx"}, timeout=120)
        assert swap.status_code == 200, swap.text
        assert provisioned_at == [10]  # the heavy part at low priority
        reply = httpx.post(f"{url}/detect", content=(Path(ASSETS) / "bus.jpg").read_bytes(),
                           headers={"Content-Type": "image/jpeg"}, timeout=60)
        assert reply.status_code == 200 and "student" in {d["class_name"] for d in reply.json()["detections"]}
        made = {tid: seen for tid, seen in thread_nice().items() if tid not in before}
        assert made, "the new engine made no thread"
        assert all(nice == 0 for _, nice in made.values()), made
