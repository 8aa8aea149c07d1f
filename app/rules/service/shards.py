"""Camera shards: rules evaluation on more than one core (CAMPUSGUARD_RULES_WORKERS >= 2).

Rule evaluation is pure Python (ByteTrack, the state machines) and holds the GIL, so threads
cannot spread it over cores. With ``workers`` >= 2 each camera's rule state lives in one of
``workers`` worker processes (shard_worker.py), chosen by a stable hash of its id, so a camera
always goes to the same worker and its frames stay in order (the camera's lock is held for
the round trip). Only the evaluation moves: the frame's bookkeeping (events, snapshots, clips,
metrics, the detection log, the fleet state) stays in the service's process with its single
writers, fed by what the worker returns.

``ShardedCamera`` stands in for ``CameraRules`` in the camera table: it mirrors what the rest
of the service reads (zones, zone counts, open events, rule time, track ids) from each reply.

A worker that dies (killed, out of memory) is noticed by its reader thread (end of pipe) and
started again at once; its cameras' states are gone, so on their next frame each camera ends
its open events at its last rule time (as a reset does) and starts afresh on the new worker.
The frame that met the crash is evaluated again there, not lost.

A worker that hangs (a deadlock, a stopped process, a frame stuck in a loop) ends no pipe, so
every request also has a deadline (``answer_within_s``, CAMPUSGUARD_RULES_WORKER_TIMEOUT_S): a
worker that has not answered by then is killed and restarted the same way. One frame of rule
evaluation takes milliseconds; the deadline starts once the worker said it is ready (its
imports take a fraction of a second, more on a busy machine, and up to ``START_WITHIN_S``
is allowed for them). ``on_restart(index, reason)`` ("ended" or "hung") feeds
``campusguard_rules_worker_restarts_total``.
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import multiprocessing as mp
import threading
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from app.core.sharding import shard_of
from app.core.timeutil import UTC
from app.core.types import Detection
from app.rules.logic.compiled import CompiledZone, Transition
from app.rules.logic.evaluator import CameraRules, CameraState
from app.rules.logic.records import Event
from app.rules.service.shard_worker import READY, Reply, as_tuples, receive, send, serve
from app.rules.site.schema import Camera, SiteConfig

log = logging.getLogger("campusguard.rules.shards")
START_WITHIN_S = 120.0  # a worker that has not imported its tracker by then is hung too


class WorkerCrashed(RuntimeError):
    """The worker process of a shard ended while a frame was in flight."""


class _Answer:
    """One request's answer, filled by the reader thread (or a crash), waited for by the caller.

    A lock held from creation until the answer arrives: cheaper than a ``Future`` (no
    condition variable, no callbacks) on a path taken once per frame; exactly one side ever
    fills it (whoever takes it out of ``_pending``)."""

    __slots__ = ("_done", "_value", "_error")

    def __init__(self) -> None:
        self._done = threading.Lock()
        self._done.acquire()
        self._value: Any = None
        self._error: BaseException | None = None

    def set_result(self, value: Any) -> None:
        self._value = value
        self._done.release()

    def set_exception(self, error: BaseException) -> None:
        self._error = error
        self._done.release()

    def result(self, timeout: float) -> Any:
        if not self._done.acquire(timeout=timeout):
            raise TimeoutError
        if self._error is not None:
            raise self._error
        return self._value


class Shard:
    """One worker process, its pipe and the reader thread that hands replies to their callers."""

    def __init__(self, index: int, answer_within_s: float = 30.0,
                 on_restart: Callable[[int, str], None] = lambda index, reason: None) -> None:
        self.index, self.answer_within_s, self.on_restart = index, answer_within_s, on_restart
        self.generation = 0  # bumped on each (re)start: rule states older than it are gone
        self.restarts = 0
        self._ids = itertools.count()
        self._send_lock = threading.RLock()
        self._state_lock = threading.Lock()
        self._pending: dict[int, _Answer] = {}
        self._stopping = False
        self._start()

    def _start(self) -> None:
        ctx = mp.get_context("spawn")  # never fork a process that holds torch / server threads
        here, there = ctx.Pipe()
        self.process = ctx.Process(target=serve, args=(there,), name=f"campusguard-rules-{self.index}", daemon=True)
        self.process.start()
        there.close()
        self.conn = here
        self.generation += 1
        self._hung_generation = 0
        self.ready = threading.Event()  # set by the reader on the worker's READY
        threading.Thread(target=self._read, args=(here, self.generation), daemon=True,
                         name=f"rules-shard-{self.index}-reader").start()

    @property
    def pid(self) -> int | None:
        return self.process.pid

    def _read(self, conn, generation: int) -> None:
        ready = self.ready
        while True:
            try:
                rid, ok, result = receive(conn)
            except (EOFError, OSError):
                self._crashed(generation)
                return
            if rid == READY:
                ready.set()
                continue
            fut = self._pending.pop(rid, None)
            if fut is not None:
                fut.set_result(result) if ok else fut.set_exception(RuntimeError(result))

    def _crashed(self, generation: int, reason: str = "ended") -> None:
        """The pipe ended (or the worker hung and was killed): fail what was in flight and start
        the worker again (once per generation)."""
        with self._send_lock, self._state_lock:  # no request is sent on a pipe being replaced
            if generation != self.generation or self._stopping:
                return
            pending, self._pending = self._pending, {}
            code = self.process.exitcode if not self.process.is_alive() else None
            # killed by _hung: its reader saw EOF first
            reason = "hung" if generation == self._hung_generation else reason
            log.error("rules worker %d (pid %s) %s (exit code %s): restarting it; its cameras' open events "
                      "end and their rule state starts afresh", self.index, self.process.pid,
                      "hung and was killed" if reason == "hung" else "ended", code)
            self.restarts += 1
            self.ready.set()  # wakes a caller still waiting for this generation to start: its future fails below
            self.conn.close()
            self._start()
        self.on_restart(self.index, reason)
        for fut in pending.values():
            fut.set_exception(WorkerCrashed(f"rules worker {self.index} {reason}"))

    def _hung(self, generation: int) -> None:
        """No answer within the deadline: kill the worker of ``generation`` (a stopped or
        deadlocked process ends no pipe by itself) and restart it at once."""
        with self._state_lock:
            if generation != self.generation or self._stopping:
                return  # another caller already replaced it
            log.error("rules worker %d (pid %s) has not answered within %g s: killing it", self.index,
                      self.process.pid, self.answer_within_s)
            self._hung_generation = generation
            hung = self.process
            hung.kill()  # SIGKILL ends a stopped process too
        hung.join(timeout=5)  # that process, even if its reader has started the next one meanwhile
        self._crashed(generation, "hung")

    def call(self, op: str, token: str, args: Any = None, reply: bool = True, generation: int | None = None) -> Any:
        """Send one request; wait for its answer (``reply``). WorkerCrashed when the worker dies
        first, or (``generation``) when it is no longer the worker of that generation."""
        with self._send_lock:
            if generation is not None and generation != self.generation:
                raise WorkerCrashed(f"rules worker {self.index} was restarted")
            generation, rid, ready = self.generation, next(self._ids), self.ready
            fut: _Answer | None = _Answer() if reply else None
            if fut is not None:
                self._pending[rid] = fut
            try:
                send(self.conn, (rid, op, token, args))
            except (OSError, ValueError):
                self._pending.pop(rid, None)
                self._crashed(generation)
                raise WorkerCrashed(f"rules worker {self.index} is gone") from None
        if fut is None:
            return None
        try:
            if not ready.wait(START_WITHIN_S):  # a worker still starting: its deadline has not begun
                raise TimeoutError
            return fut.result(timeout=self.answer_within_s)
        except TimeoutError:
            self._hung(generation)
            raise WorkerCrashed(f"rules worker {self.index} did not answer within {self.answer_within_s:g} s") from None

    def stop(self) -> None:
        with self._send_lock, self._state_lock:
            self._stopping = True
            try:
                send(self.conn, (-1, "stop", "", None))  # the worker returns; its end of the pipe closes
            except (OSError, ValueError):
                pass
            pending, self._pending = self._pending, {}
            self.ready.set()  # a caller still waiting for the start fails below instead of waiting it out
        for fut in pending.values():  # a frame in flight at shutdown is not answered any more
            fut.set_exception(WorkerCrashed(f"rules worker {self.index} stopped"))
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(timeout=5)
        self.conn.close()


class Shards(Protocol):
    """Where the camera table's rule states are made: ``ShardPool`` (worker processes) or ``InProcess``."""

    shards: list[Shard]

    def camera(self, camera: Camera, site: SiteConfig) -> CameraState: ...

    def stop(self) -> None: ...


class ShardPool(Shards):
    """``workers`` shards; a camera's shard is a stable hash of its id (the same in every process and run)."""

    def __init__(self, workers: int, answer_within_s: float = 30.0,
                 on_restart: Callable[[int, str], None] = lambda index, reason: None) -> None:
        if workers < 2:
            raise ValueError("a shard pool needs at least 2 workers (1 evaluates in the service's process)")
        self.shards = [Shard(i, answer_within_s, on_restart) for i in range(workers)]

    def shard_of(self, camera_id: str) -> Shard:
        return self.shards[shard_of(camera_id, len(self.shards))]

    def camera(self, camera: Camera, site: SiteConfig) -> ShardedCamera:
        """The camera-table factory: a camera's state, kept in its shard."""
        return ShardedCamera(camera, site, self.shard_of(camera.id))

    def stop(self) -> None:
        for shard in self.shards:
            shard.stop()


class InProcess(Shards):
    """CAMPUSGUARD_RULES_WORKERS=1: every camera's rule state in the service's process (no shards)."""

    shards: list[Shard] = []

    def camera(self, camera: Camera, site: SiteConfig) -> CameraRules:
        return CameraRules(camera, site)

    def stop(self) -> None:
        pass


def shard_pool(workers: int, answer_within_s: float = 30.0,
               on_restart: Callable[[int, str], None] = lambda index, reason: None) -> ShardPool | InProcess:
    return ShardPool(workers, answer_within_s, on_restart) if workers > 1 else InProcess()


class ShardedCamera(CameraState):
    """A camera whose rule state lives in a worker: the ``CameraState`` of ``CameraRules``, kept in its shard."""

    def __init__(self, camera: Camera, site: SiteConfig, shard: Shard) -> None:
        self.camera, self.id, self._shard = camera, camera.id, shard
        self.zones = [CompiledZone(z, site.timezone) for z in camera.zones]  # config only: overlays, rule options
        self.lock = threading.Lock()
        self.last_t: float | None = None
        self.zone_counts: dict[str, int] = {z.name: 0 for z in self.zones}
        self.frame_time: dt.datetime | None = None
        self.frame_tracks: list[int | None] = []
        self._setup = (camera, site.timezone, site.tracker)
        self._token = uuid.uuid4().hex
        self._generation: int | None = None  # the worker generation that holds this camera's state
        self._open: dict[str, tuple[tuple[int, int], Event]] = {}  # event id -> (zone, rule index), event

    def evaluate(self, when: dt.datetime, frame_size: tuple[int, int],
                 detections: Sequence[Detection]) -> list[Transition]:
        lost: list[Transition] = []
        for _ in range(3):
            generation = self._shard.generation
            if self._generation is not None and self._generation != generation:
                lost += self._restart()  # the worker was restarted: this camera's state is gone
            setup = self._setup if self._generation is None else None
            try:
                reply: Reply = self._shard.call("eval", self._token, (when, frame_size, as_tuples(detections), setup),
                                               generation=generation)
            except WorkerCrashed:
                continue  # the shard was restarted: end what was open, evaluate the frame there
            self._generation = generation
            return lost + self._apply(reply)
        raise WorkerCrashed(f"rules worker {self._shard.index} keeps ending; frame of camera {self.id} not evaluated")

    def _restart(self) -> list[Transition]:
        ended = self.close_all()
        self._generation = None
        return ended

    def _apply(self, reply: Reply) -> list[Transition]:
        transitions, counts, frame_time, tracks, last_t, grown = reply
        self.zone_counts, self.frame_time, self.frame_tracks, self.last_t = counts, frame_time, tracks, last_t
        out: list[Transition] = []
        for kind, event, zi, ri, ends_at in transitions:
            rule = self.zones[zi].rules[ri] if zi >= 0 else None
            if kind == "started":
                if ends_at is None:  # an instant event (line crossing) is never open
                    self._open[event.id] = ((zi, ri), event)
            else:
                mine = self._open.pop(event.id, None)
                if mine is not None:  # this side's copy: it carries the snapshot and clip set on its start
                    kept = mine[1]
                    kept.ended_at, kept.max_count, kept.objects = event.ended_at, event.max_count, event.objects
                    event = kept
            out.append(Transition(kind, event, rule, ends_at))  # type: ignore[arg-type]
        for event_id, max_count, objects in grown:
            if event_id in self._open:
                ev = self._open[event_id][1]
                ev.max_count, ev.objects = max_count, objects
        return out

    def close_all(self) -> list[Transition]:
        """End every open event at the camera's last rule time (as ``CameraRules.close_all``) and
        free the worker's state; this camera state is not evaluated again."""
        out = []
        for (zi, ri), event in sorted(self._open.values(), key=lambda v: v[0]):
            last = dt.datetime.fromtimestamp(self.last_t, UTC) if self.last_t is not None else event.started_at
            event.ended_at = max(last, event.started_at)
            out.append(Transition("ended", event, self.zones[zi].rules[ri]))
        self._open = {}
        if self._generation == self._shard.generation:
            try:
                self._shard.call("drop", self._token, reply=False, generation=self._generation)
            except WorkerCrashed:
                pass  # gone with its worker
        return out

    def open_events(self) -> list[Event]:
        return [ev for _, ev in sorted(self._open.values(), key=lambda v: v[0])]


