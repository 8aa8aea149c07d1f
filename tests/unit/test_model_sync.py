"""The replicas' model sync over a log in memory and a recording switch (mechanics; the real
thing end to end: tests/unit/test_models_replicas.py): a change made while the store is down
is written at the next poll and not applied twice here; another replica's change of a name that
is busy here waits for the next poll; one whose weights file differs here is refused and shown
until a later change of the name applies."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path

import pytest

from app.core.files import file_sha256
from app.core.modellog import LoggedChange
from app.core.slot import Slot
from app.core.timeutil import utcnow
from app.flow.modelchanges import ModelChange
from app.flow.models import ModelRouter
from app.flow.modelswap import ModelConflict
from app.inference.modelset import ModelSet, ServedModel
from app.wiring.model_sync import ModelSync, SyncOptions


class MemoryLog:
    enabled = True

    def __init__(self) -> None:
        self.rows: list[LoggedChange] = []
        self.down = False

    def append(self, change: LoggedChange) -> int:
        if self.down:
            raise ConnectionError("the store is down")
        self.rows.append(dataclasses.replace(change, seq=len(self.rows) + 1))
        return len(self.rows)

    def after(self, seq: int, limit: int = 500) -> list[LoggedChange]:
        return [row for row in self.rows if row.seq > seq][:limit]


class RecordingSwitch:
    """What the sync asks of the ModelSwitch, done on the router; ``busy`` refusals first."""

    def __init__(self, router: ModelRouter, folder: Path) -> None:
        self.router, self.folder, self.calls, self.busy = router, folder, [], 0

    def _busy(self, name: str) -> None:
        if self.busy:
            self.busy -= 1
            raise ModelConflict(f"model {name!r} is being changed already", code="model_busy")

    def swap(self, name: str, weights: str) -> None:
        self._busy(name)
        self.calls.append(("swap", name, weights))
        self.router.models.replace(dataclasses.replace(self.router.models.get(name), weights=self.folder / weights))

    def load(self, name: str, weights: str) -> None:
        self.calls.append(("load", name, weights))
        self.router.models.add(ServedModel(name, self.folder / weights))

    def unload(self, name: str) -> None:
        self.calls.append(("unload", name))
        self.router.models.remove(name)


@pytest.fixture()
def folder(tmp_path: Path) -> Path:
    for name in ("a.pt", "b.pt", "c.pt", "d.pt"):
        (tmp_path / name).write_bytes(name.encode() * 100)
    return tmp_path


def remote(folder: Path, name: str, action: str, weights: str, sha: str | None = None) -> LoggedChange:
    return LoggedChange(at=utcnow(), name=name, action=action, weights=weights,
                        weights_sha256=sha or file_sha256(folder / weights), models_file_sha256=None, by="replica-2")


def test_the_sync_publishes_late_retries_busy_names_and_shows_what_it_refused(folder: Path):
    router = ModelRouter(ModelSet([ServedModel("coco", folder / "a.pt")]))
    switch, log = RecordingSwitch(router, folder), MemoryLog()
    sync = ModelSync(Slot(switch), router, SyncOptions("replica-1", 0.0, folder, None))  # type: ignore[arg-type]
    sync.attach(log, ready=lambda: True)

    # this replica swaps coco to b.pt while the store is down: kept, written at the next poll
    before = router.models.get("coco")
    after = dataclasses.replace(before, weights=folder / "b.pt")
    router.models.replace(after)
    log.down = True
    sync.changed(ModelChange("swap", "coco", before, after))
    assert log.rows == [] and sync.report()["unpublished"] == 1
    log.down = False
    sync.poll()
    assert [(r.name, r.action, r.weights, r.by) for r in log.rows] == [("coco", "swap", "b.pt", "replica-1")]
    assert sync.report()["unpublished"] == 0 and sync.caught_up and sync.last_seq == 1
    assert switch.calls == []  # already in force here

    # another replica swaps coco to c.pt while coco is busy here: retried, then applied
    log.append(remote(folder, "coco", "swap", "c.pt"))
    switch.busy = 1
    sync.poll()
    assert sync.last_seq == 1 and router.models.get("coco").weights.name == "b.pt"
    sync.poll()
    assert sync.last_seq == 2 and switch.calls == [("swap", "coco", "c.pt")]

    # a load whose weights file differs here: refused and shown, nothing loaded
    log.append(remote(folder, "extra", "load", "d.pt", sha="0" * 64))
    sync.poll()
    (refused,) = sync.report()["refused"]
    assert refused["name"] == "extra" and refused["error"] == "weights_differ" and refused["by"] == "replica-2"
    assert router.models.find("extra") is None and sync.last_seq == 3

    # a later change of the name that applies clears it; so does an unload of it
    log.append(remote(folder, "extra", "load", "d.pt"))
    log.append(dataclasses.replace(remote(folder, "extra", "unload", "d.pt"), weights=None, weights_sha256=None))
    sync.poll()
    assert switch.calls[-2:] == [("load", "extra", "d.pt"), ("unload", "extra")]
    assert sync.report()["refused"] == [] and sync.last_seq == 5 and router.models.find("extra") is None


class SlowLog(MemoryLog):
    """A store that takes a while to write: a second flush arrives meanwhile."""

    def __init__(self) -> None:
        super().__init__()
        self.writing = threading.Event()

    def append(self, change: LoggedChange) -> int:
        self.writing.set()
        time.sleep(0.2)
        return super().append(change)


def test_a_change_and_the_poller_flushing_at_once_write_each_row_once(folder: Path):
    router = ModelRouter(ModelSet([ServedModel("coco", folder / "a.pt")]))
    log = SlowLog()
    sync = ModelSync(Slot(RecordingSwitch(router, folder)), router,  # type: ignore[arg-type]
                     SyncOptions("replica-1", 0.0, folder, None))
    sync.attach(log, ready=lambda: True)
    before = router.models.get("coco")
    after = dataclasses.replace(before, weights=folder / "b.pt")
    router.models.replace(after)
    errors: list[BaseException] = []

    def poll() -> None:
        log.writing.wait(5)
        try:
            sync.poll()  # while the change's own flush is writing
        except BaseException as exc:  # noqa: BLE001 - what the poller thread would die of
            errors.append(exc)

    poller = threading.Thread(target=poll)
    poller.start()
    sync.changed(ModelChange("swap", "coco", before, after))
    poller.join(10)
    assert errors == []
    assert [(r.name, r.weights) for r in log.rows] == [("coco", "b.pt")]
    assert sync.report()["unpublished"] == 0
