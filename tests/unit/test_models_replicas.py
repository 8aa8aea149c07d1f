"""Issue 41 part 3: replicas agree on runtime model changes within seconds. Two apps in one
process (each with its lifespan: torch, 320 px, no warm-up) share one SQLite event store and one
models folder, as two replicas share PostgreSQL and a ReadOnlyMany volume: a load, a swap of the
default and an unload made on A show on B after B's next polls; a replica started later catches
up from the log, unless its models file changed since the changes (then the file wins)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from app.config import Settings
from app.main import create_app
from tests.support.inprocess import wait_until_ready
from tests.support.models import renamed_copy

SITE = ("cameras: [{id: hall, zones: [{name: all, polygon: [[0, 0], [1, 0], [1, 1], [0, 1]], "
        "rules: [{type: intrusion, classes: [person]}]}]}]\n")
MODELS = "models:\n  - {name: coco, weights: yolov8n.pt}\n"
POLL_S = 0.3


@pytest.fixture()
def shared(tmp_path: Path, weights: Path) -> Path:
    """The models folder and the site file every replica mounts, and the store they share."""
    folder = tmp_path / "models"
    folder.mkdir()
    (folder / "yolov8n.pt").write_bytes(weights.read_bytes())
    renamed_copy(weights, folder / "campus.pt", {2: "vehicle", 5: "coach"})  # the site rule (person) holds
    (folder / "models.yaml").write_text(MODELS)
    (tmp_path / "site.yaml").write_text(SITE)
    return tmp_path


@contextmanager
def replica(shared: Path, name: str, store: str = "") -> Iterator[TestClient]:
    """One replica's app (``store``: the event store's URL; default: a SQLite file in ``shared``)."""
    own = shared / name
    own.mkdir(exist_ok=True)
    settings = Settings(_env_file=None, weights=shared / "models" / "yolov8n.pt",
                        models_file=shared / "models" / "models.yaml", backend="torch", precision="fp32", imgsz=320,
                        warmup_iters=0, threads=1, preprocess_workers=1, ingest="off", data_dir=own,
                        site_config=shared / "site.yaml", events_db_url=store or f"sqlite:///{shared}/events.db",
                        snapshot_dir=own / "snapshots", clips=False, site_watch_s=0, fleet_interval_s=0,
                        replica_id=name, models_sync_s=POLL_S)
    with TestClient(create_app(settings)) as client:
        wait_until_ready(client, 180)
        yield client


def served(client: TestClient) -> dict[str, str]:
    """name -> the first 12 hex digits of the weights it serves (GET /models)."""
    return {m["name"]: m["weights_sha256"] for m in client.get("/models").json()["models"] if m["state"] == "ready"}


def eventually(check: Callable[[], bool], what: str, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(POLL_S / 3)


def test_a_load_swap_and_unload_on_one_replica_show_on_the_other(shared: Path):
    with ExitStack() as stack:
        a, b = stack.enter_context(replica(shared, "replica-a")), stack.enter_context(replica(shared, "replica-b"))
        first = served(b)
        assert served(a) == first and list(first) == ["coco"]
        sync = b.get("/models").json()["sync"]
        assert sync["enabled"] and sync["replica"] == "replica-b" and sync["poll_s"] == POLL_S

        assert a.post("/admin/models", json={"name": "extra", "weights": "campus.pt"}).status_code == 201
        eventually(lambda: "extra" in served(b), "B never loaded the model A loaded")
        assert served(b)["extra"] == served(a)["extra"] != first["coco"]

        assert a.put("/admin/models/coco", json={"weights": "campus.pt"}).status_code == 200
        swapped = served(a)["coco"]
        assert swapped != first["coco"]
        eventually(lambda: served(b).get("coco") == swapped, "B still serves the old weights behind coco")
        detected = b.post("/detect", files={"image": ("bus.jpg", bus_jpg(), "image/jpeg")}).json()
        assert detected["model"] == "coco" and "coach" in {d["class_name"] for d in detected["detections"]}  # bus.jpg

        assert a.delete("/admin/models/extra").status_code == 200
        eventually(lambda: "extra" not in {m["name"] for m in b.get("/models").json()["models"]},
                   "B still serves the model A unloaded")
        for each in (a, b):  # the unload shows before the poll that applied it ends: its seq a moment later
            eventually(lambda c=each: c.get("/models").json()["sync"]["last_seq"] == 3, "the log not read to the end")
        sync = b.get("/models").json()["sync"]
        assert sync["caught_up"] and sync["refused"] == [] and sync["unpublished"] == 0

    # a replica started later catches up from the log: coco behind campus.pt, no extra
    with replica(shared, "replica-c") as c:
        eventually(lambda: served(c).get("coco") == swapped, "C did not catch up with the log")
        assert list(served(c)) == ["coco"]

    # the models file changed since the changes: it wins (coco serves yolov8n.pt again)
    (shared / "models" / "models.yaml").write_text("# edited after the swap\n" + MODELS)
    with replica(shared, "replica-d") as d:
        eventually(lambda: d.get("/models").json()["sync"]["caught_up"], "D never read the log")
        assert served(d) == {"coco": first["coco"]}


def test_a_change_another_replica_cannot_apply_is_shown_there(shared: Path):
    """B's site file has a camera on coco whose rule needs `car`: A's swap of coco to weights
    without `car` is refused on B, which says so in GET /models and keeps serving what it had."""
    with ExitStack() as stack:
        a = stack.enter_context(replica(shared, "replica-a"))
        (shared / "site.yaml").write_text(SITE.replace("classes: [person]", "classes: [car]"))
        b = stack.enter_context(replica(shared, "replica-b"))
        before = served(b)
        (shared / "models" / "campus-nocar.pt").write_bytes((shared / "models" / "campus.pt").read_bytes())
        assert a.put("/admin/models/coco", json={"weights": "campus-nocar.pt"}).status_code == 200
        eventually(lambda: b.get("/models").json()["sync"]["refused"], "B did not report the change it refused")
        (refused,) = b.get("/models").json()["sync"]["refused"]
        assert refused["name"] == "coco" and refused["action"] == "swap" and refused["by"] == "replica-a"
        assert refused["error"] == "model_classes_mismatch" and refused["weights"] == "campus-nocar.pt"
        assert served(b) == before


def test_replicas_agree_through_postgresql(shared: Path, pg_url: str):
    """The same through PostgreSQL, as the replicas of a site share it (compose, Kubernetes)."""
    with ExitStack() as stack:
        a = stack.enter_context(replica(shared, "replica-a", pg_url))
        b = stack.enter_context(replica(shared, "replica-b", pg_url))
        assert a.post("/admin/models", json={"name": "extra", "weights": "campus.pt"}).status_code == 201
        assert a.put("/admin/models/coco", json={"weights": "campus.pt"}).status_code == 200
        eventually(lambda: served(b) == served(a) and len(served(b)) == 2, "B did not follow A through PostgreSQL")
        eventually(lambda: b.get("/models").json()["sync"]["last_seq"] == 2, "B did not read the log to the end")


def bus_jpg() -> bytes:
    from ultralytics.utils import ASSETS

    return (Path(ASSETS) / "bus.jpg").read_bytes()
