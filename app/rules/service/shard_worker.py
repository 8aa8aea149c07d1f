"""The worker-process side of the camera shards (shards.py): rule states evaluated off the service's process.

A worker holds the ``CameraRules`` of the cameras hashed to it, keyed by the token of the
service-side ``ShardedCamera`` (a reset or reload makes a new token, so a retired state is
never stepped again), and answers one request at a time, in the order sent. It writes
nothing and sends nothing anywhere but its pipe: events, metrics, the detection log and the
fleet state stay with the service's single writers, which get what it returns.
"""

from __future__ import annotations

import datetime as dt
import pickle
from collections.abc import Sequence
from multiprocessing.connection import Connection
from typing import Any

from app.core.types import Detection
from app.rules.logic.compiled import CompiledRule
from app.rules.logic.evaluator import CameraRules
from app.rules.logic.records import Event
from app.rules.site.schema import Camera, SiteConfig, TrackerConfig

# what one evaluated frame sends back: transitions as (kind, event, zone index, rule index,
# instant end), zone counts, rule time, track ids, rule clock, and the open events whose peak
# count (and so objects) changed without a transition: (id, max_count, objects)
Reply = tuple[list[tuple[str, Event, int, int, dt.datetime | None]], dict[str, int], dt.datetime, list[int | None],
              float, list[tuple[str, int, list]]]


class _State:
    __slots__ = ("rules", "where")

    def __init__(self, camera: Camera, timezone: str, tracker: TrackerConfig) -> None:
        site = SiteConfig.model_construct(timezone=timezone, tracker=tracker, cameras=())  # all CameraRules reads
        self.rules = CameraRules(camera, site)
        self.where: dict[int, tuple[int, int]] = {id(r): (zi, ri) for zi, z in enumerate(self.rules.zones)
                                                  for ri, r in enumerate(z.rules)}

    def evaluate(self, when: dt.datetime, size: tuple[int, int], detections: list[Detection]) -> Reply:
        cam = self.rules
        before = {e.id: e.max_count for e in cam.open_events()}
        out: list[tuple[str, Event, int, int, dt.datetime | None]] = []
        for tr in cam.evaluate(when, size, detections):
            zi, ri = self.where[id(tr.rule)] if isinstance(tr.rule, CompiledRule) else (-1, -1)
            out.append((tr.kind, tr.event, zi, ri, tr.ends_at))
        grown = [(e.id, e.max_count, e.objects) for e in cam.open_events()
                 if e.id in before and e.max_count != before[e.id]]
        assert cam.frame_time is not None and cam.last_t is not None
        return out, dict(cam.zone_counts), cam.frame_time, list(cam.frame_tracks), cam.last_t, grown


def as_tuples(detections: Sequence[Detection]) -> list[tuple]:
    """Detections as plain tuples for the pipe: pickling a slotted dataclass goes through its
    ``__getstate__``, several times the cost of a tuple of numbers, once per object per frame."""
    return [(d.class_id, d.class_name, d.confidence, d.x1, d.y1, d.x2, d.y2) for d in detections]


def send(conn: Connection, message: Any) -> None:
    """One message on the shard pipe: plain pickle (multiprocessing's ``send`` builds a
    ``ForkingPickler`` with a copied dispatch table per message; nothing here needs it)."""
    conn.send_bytes(pickle.dumps(message, pickle.HIGHEST_PROTOCOL))


def receive(conn: Connection) -> Any:
    return pickle.loads(conn.recv_bytes())


READY = -1  # the request id of the worker's first message: its imports are done, deadlines start


def serve(conn: Connection) -> None:
    """The worker's loop: ``(request id, op, token, args)`` in, ``(request id, ok, result)`` out.

    ops: ``eval`` (args: when, frame size, detections, and the camera's setup the first time
    this worker sees the token), ``drop`` (forget a retired state; no answer), ``ping``, ``stop``.
    First the evaluator and the tracker are imported (no model stack: ~0.3 s, more on a busy
    machine) and ``READY`` sent, so the service's answer deadline measures evaluation, never
    the worker's start."""
    from app.rules.logic.tracking import check_tracker

    try:
        check_tracker()
    except Exception:  # noqa: BLE001 - the first frame then reports it as that frame's error
        pass
    send(conn, (READY, True, "ready"))
    states: dict[str, _State] = {}
    while True:
        try:
            rid, op, token, args = receive(conn)
        except (EOFError, OSError):
            return  # the service went away
        try:
            result: Any = None
            if op == "eval":
                when, size, detections, setup = args
                state = states.get(token)
                if state is None:
                    if setup is None:
                        raise LookupError(f"no rule state for token {token}")
                    state = states[token] = _State(*setup)
                result = state.evaluate(when, size, [Detection(*d) for d in detections])
            elif op == "drop":
                states.pop(token, None)
                continue
            elif op == "stop":
                return
            elif op == "ping":
                result = len(states)
            else:
                raise ValueError(f"unknown op {op!r}")
            send(conn, (rid, True, result))
        except Exception as exc:  # a bug in one frame must not take the shard down
            send(conn, (rid, False, f"{type(exc).__name__}: {exc}"))
