"""Replay: a site file's rules over the logged detections, next to the events recorded.

``compare(store, site, since, until)`` answers "what would this site file have raised?"
without a model or images: each camera's logged frames (app/rules/store/framelog.py) go, in the
order the live service evaluated them, through a fresh ``CameraRules`` of the new site
file, the very evaluator the service runs, tracker included. Nothing is written, sent or
counted. The events it raises are matched one-to-one with the rule events the store
recorded, on (camera, zone, rule, started_at, ended_at); track ids are not compared
(ultralytics releases before per-tracker numbering count ids across every tracker of the
process, so ids can differ between runs while the tracks, and so the events, do not).

Edges of the window, so that an unchanged site file reproduces the recorded events:

* **warm-up**: frames from ``since`` minus the longest ``min_duration_s + clear_after_s +
  cooldown_s`` of the site's rules (at most an hour) are evaluated first, so a condition
  that already held at ``since`` is as far along as it was live; events starting before
  ``since`` are not compared (on either side);
* **run-out**: frames after ``until`` are evaluated (up to an hour) while an event that
  started in the window is still open, so its end is known as it was live; an event still
  open at the last frame read has no end on either side;
* **fresh state**: where the live camera's rule state started afresh (restart, reset,
  offline spell, changed config), replay ends its open events at the previous frame and
  starts afresh too.

Camera health events (``camera_offline``/``camera_online``) and view problems
(``camera_view``: no frames are logged) are not rule events and are not compared.
"""

from __future__ import annotations

import datetime as dt
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context

from app.core.errors import InvalidParameter, NotFound
from app.core.sharding import shard_of
from app.core.timeutil import as_utc, iso, shift_clamped
from app.rules.logic.evaluator import CameraRules
from app.rules.logic.records import Event
from app.rules.site.schema import Camera, SiteConfig
from app.rules.store.db import EventStore
from app.rules.store.framelog import LoggedFrame, decode

MAX_MARGIN = dt.timedelta(hours=1)
Progress = Callable[[int], None]  # called with the number of frames just evaluated


class EmptyWindow(InvalidParameter):
    """No frames were logged in the replay window."""

    code = "empty_window"


@dataclass(frozen=True, slots=True)
class Span:
    """An event as replay compares it."""

    camera_id: str
    zone: str
    rule: str
    started_at: dt.datetime
    ended_at: dt.datetime | None  # None: still open at the last frame read

    def to_dict(self) -> dict[str, str | None]:
        return {"started_at": iso(self.started_at), "ended_at": iso(self.ended_at)}


@dataclass(slots=True)
class RuleDiff:
    """One camera/zone/rule: the events recorded and replayed, and how they pair up."""

    camera_id: str
    zone: str
    rule: str
    recorded: int = 0
    replayed: int = 0
    matched: int = 0
    only_recorded: list[Span] = field(default_factory=list)  # would disappear with the new file
    only_replayed: list[Span] = field(default_factory=list)  # new with the new file

    def to_dict(self) -> dict:
        return {"camera_id": self.camera_id, "zone": self.zone, "rule": self.rule, "recorded": self.recorded,
                "replayed": self.replayed, "matched": self.matched,
                "only_recorded": [s.to_dict() for s in self.only_recorded],
                "only_replayed": [s.to_dict() for s in self.only_replayed]}


@dataclass(slots=True)
class Comparison:
    since: dt.datetime
    until: dt.datetime
    frames: int  # logged frames in [since, until) that were replayed
    cameras: list[str]
    rules: list[RuleDiff]

    def totals(self) -> dict[str, int]:
        keys = ("recorded", "replayed", "matched")
        out = {k: sum(getattr(r, k) for r in self.rules) for k in keys}
        out["only_recorded"] = sum(len(r.only_recorded) for r in self.rules)
        out["only_replayed"] = sum(len(r.only_replayed) for r in self.rules)
        return out

    def to_dict(self) -> dict:
        return {"since": iso(self.since), "until": iso(self.until), "frames": self.frames, "cameras": self.cameras,
                "totals": self.totals(), "rules": [r.to_dict() for r in self.rules]}


def margin(site: SiteConfig) -> dt.timedelta:
    """How far before ``since`` (warm-up) and after ``until`` (run-out) frames are read."""
    longest = max((r.min_duration_s + r.clear_after_s + r.cooldown_s
                   for c in site.cameras for z in c.zones for r in z.rules), default=0.0)
    return min(dt.timedelta(seconds=longest), MAX_MARGIN)


def compare(store: EventStore, site: SiteConfig, since: dt.datetime, until: dt.datetime,
            camera_ids: Iterable[str] | None = None, progress: Progress | None = None,
            on_total: Callable[[int], None] | None = None, workers: int = 1) -> Comparison:
    """Replay ``site`` over the frames logged in [since, until) and compare with the store.

    ``camera_ids``: only these (each must be in ``site``); default every camera of ``site``.
    ``on_total`` is told the number of frames to evaluate before the first one is
    (progress bars). ``workers`` > 1: the cameras replayed in that many processes, split as
    the live shards split them (``replay_parallel``; the same spans). Raises InvalidParameter (bad
    window), NotFound (unknown camera) and EmptyWindow (no logged frame)."""
    since, until = as_utc(since), as_utc(until)
    if since >= until:
        raise InvalidParameter(f"since ({iso(since)}) must be before until ({iso(until)})")
    cameras = {c.id: c for c in site.cameras}
    chosen = list(dict.fromkeys(camera_ids)) if camera_ids else list(cameras)
    unknown = [c for c in chosen if c not in cameras]
    if unknown:
        raise NotFound(f"camera(s) {', '.join(map(repr, unknown))} not in the site file "
                       f"(it has {', '.join(cameras)})", code="unknown_camera")
    pad = margin(site)
    in_window = store.frames.count(chosen, since, until)
    if not sum(in_window.values()):
        raise EmptyWindow(f"no logged frames of camera(s) {', '.join(chosen)} between {iso(since)} and {iso(until)} "
                          "(is CAMPUSGUARD_DETECTION_LOG on, and were frames sent then?)")
    if on_total is not None:
        on_total(sum(store.frames.count(chosen, shift_clamped(since, -pad), until).values()))
    if workers > 1 and len(chosen) > 1 and ":memory:" not in store.url:
        replayed, lasts, done = replay_parallel(store.url, site, chosen, since, until, workers)
        if progress is not None and done:
            progress(done)
    else:
        replayed, lasts, _ = replay_cameras(store, site, chosen, since, until, progress)
    recorded = [Span(c, z, r, s, _open_after(e, lasts[c])) for c, z, r, s, e in
                store.events.event_spans(chosen, since, until)]
    return Comparison(since, until, sum(in_window.values()), chosen, match(site, chosen, recorded, replayed))


def replay_cameras(store: EventStore, site: SiteConfig, chosen: list[str], since: dt.datetime, until: dt.datetime,
                   progress: Progress | None = None) -> tuple[list[Span], dict[str, dt.datetime | None], int]:
    """The replayed spans of ``chosen`` cameras, the rule time of each one's last frame read,
    and how many frames of the window were evaluated (one process: live shards' workers each
    run this over their group)."""
    cameras = {c.id: c for c in site.cameras}
    pad = margin(site)
    replays = {cid: CameraReplay(cameras[cid], site, since, until) for cid in chosen}
    done = 0
    for row in store.frames.iter(chosen, shift_clamped(since, -pad), shift_clamped(until, pad)):
        cam = replays[row.camera_id]
        if cam.finished:
            if all(r.finished for r in replays.values()):
                break
            continue
        frame = decode(row)
        cam.step(frame)
        if frame.captured_at < until:
            done += 1
            if progress is not None and done % 100 == 0:
                progress(100)
    if progress is not None and done % 100:
        progress(done % 100)
    return [span for r in replays.values() for span in r.spans()], {c: r.last for c, r in replays.items()}, done


class CameraReplay:
    """One camera's frames through a fresh ``CameraRules`` of the tried site file; keeps the
    events that start in the window."""

    def __init__(self, camera: Camera, site: SiteConfig, since: dt.datetime, until: dt.datetime) -> None:
        self.camera, self.site, self.since, self.until = camera, site, since, until
        self.rules = CameraRules(camera, site)
        self.kept: dict[str, Event] = {}
        self.last: dt.datetime | None = None  # rule time of the last frame evaluated
        self.finished = False  # past ``until`` with every kept event ended: no more frames needed

    def step(self, frame: LoggedFrame) -> None:
        if frame.captured_at >= self.until and all(e.ended_at is not None for e in self.kept.values()):
            self.finished = True  # run-out over
            return
        if frame.fresh and self.last is not None:  # the live state started afresh here
            for tr in self.rules.close_all():
                tr.apply()
            self.rules = CameraRules(self.camera, self.site)
        for tr in self.rules.evaluate(frame.captured_at, (frame.width, frame.height), frame.detections):
            event = tr.apply()
            if tr.kind == "started" and self.since <= event.started_at < self.until:
                self.kept[event.id] = event
        self.last = frame.captured_at

    def spans(self) -> list[Span]:
        return [Span(self.camera.id, e.zone, e.rule, e.started_at, e.ended_at) for e in self.kept.values()]


def groups(cameras: list[str], workers: int) -> list[list[str]]:
    """``cameras`` split as the live shards split them (the same stable hash); empty groups dropped."""
    out: list[list[str]] = [[] for _ in range(workers)]
    for cid in cameras:
        out[shard_of(cid, workers)].append(cid)
    return [g for g in out if g]


def _replay_group(url: str, site_json: dict, cameras: list[str], since: dt.datetime,
                  until: dt.datetime) -> tuple[list[Span], dict[str, dt.datetime | None], int]:
    """In a worker process: replay one group of cameras over its own connection to the store."""
    store = EventStore(url, migrate=False)
    try:
        return replay_cameras(store, SiteConfig.model_validate(site_json), cameras, since, until)
    finally:
        store.close()


def replay_parallel(url: str, site: SiteConfig, cameras: list[str], since: dt.datetime, until: dt.datetime,
                    workers: int) -> tuple[list[Span], dict[str, dt.datetime | None], int]:
    """Replay on more than one core. A camera's replay needs only its own frames, in order, so
    the cameras are split into groups by the live shards' hash (service/shards.py) and each group
    is replayed in its own spawned process, which opens the store by URL and reads only its
    cameras' frames; the spans are merged here (the recorded side and the matching stay in one place)."""
    parts = groups(cameras, workers)
    site_json = site.model_dump(mode="json")
    spans: list[Span] = []
    lasts: dict[str, dt.datetime | None] = {}
    done = 0
    with ProcessPoolExecutor(len(parts), mp_context=get_context("spawn")) as pool:
        args = zip(*[(url, site_json, g, since, until) for g in parts], strict=True)  # equal 5-tuples: a transpose
        for got, last, n in pool.map(_replay_group, *args):
            spans += got
            lasts.update(last)
            done += n
    return spans, lasts, done


def _open_after(ended_at: dt.datetime | None, last_read: dt.datetime | None) -> dt.datetime | None:
    """A recorded end after the last frame replay read is one replay cannot know: open."""
    if ended_at is None or last_read is None or ended_at > last_read:
        return None
    return ended_at


def match(site: SiteConfig, cameras: list[str], recorded: list[Span], replayed: list[Span]) -> list[RuleDiff]:
    """Pair recorded and replayed events one-to-one on the whole span, per camera/zone/rule.
    Every rule of the site file has a row (zero events too), and so has every recorded rule
    that the site file no longer has."""
    rows: dict[tuple[str, str, str], RuleDiff] = {}
    for cam in site.cameras:
        if cam.id in cameras:
            for zone in cam.zones:
                for rule in zone.rules:
                    rows[(cam.id, zone.name, rule.rule_name)] = RuleDiff(cam.id, zone.name, rule.rule_name)
    for span in recorded + replayed:
        key = (span.camera_id, span.zone, span.rule)
        rows.setdefault(key, RuleDiff(*key))
    rec, rep = Counter(recorded), Counter(replayed)
    for span, n in rec.items():
        rows[(span.camera_id, span.zone, span.rule)].recorded += n
    for span, n in rep.items():
        rows[(span.camera_id, span.zone, span.rule)].replayed += n
    for span in sorted(set(rec) | set(rep), key=_order):
        row = rows[(span.camera_id, span.zone, span.rule)]
        both = min(rec[span], rep[span])
        row.matched += both
        row.only_recorded += [span] * (rec[span] - both)
        row.only_replayed += [span] * (rep[span] - both)
    return sorted(rows.values(), key=lambda r: (r.camera_id, r.zone, r.rule))


def _order(span: Span) -> tuple:
    return (span.camera_id, span.zone, span.rule, span.started_at, span.ended_at is None,
            span.ended_at or span.started_at)
