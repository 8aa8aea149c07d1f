"""Run view monitors over the labelled sequences and score them.

Per sequence: the problems raised (kind, capture time), whether a tamper sequence raised
its kind within the deadline (``persist_s`` + 5 s after the tampering began; frozen:
``frozen_after_s`` + 5 s) and how long that took, when it ended after the view came
back, and every other alarm (a false alarm). Per frame: true state against the problem
the monitor reports, leaving out the frames in which a correct monitor is still allowed
to be catching up (from the onset to the deadline, and from the restore to the end of the
allowed clearing time).
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from dataclasses import dataclass, field

from app.rules.logic.view.monitor import ViewMonitor
from app.rules.site.viewchecks import KINDS, ViewCheckOptions
from app.tooling.viewcheck.sequences import Sequence

T0 = dt.datetime(2026, 3, 2, 17, 0, tzinfo=dt.timezone.utc)
SLACK_S = 5.0  # the allowance on top of persist_s / frozen_after_s
LABELS = ("healthy", *KINDS)


@dataclass
class SequenceResult:
    name: str
    scenario: str
    category: str
    kind: str | None
    part: str
    fps: float
    frames: int = 0
    checks: int = 0
    alarms: list[tuple[str, float]] = field(default_factory=list)  # (kind, seconds) of every start
    ends: list[tuple[str, float, str]] = field(default_factory=list)  # (kind, seconds, reason)
    time_to_alarm: float | None = None
    time_to_clear: float | None = None
    false_alarms: list[tuple[str, float]] = field(default_factory=list)
    confusion: Counter = field(default_factory=Counter)  # (truth, reported) -> scored frames
    check_ms: list[float] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        if self.category == "negative":
            return not self.false_alarms
        return self.time_to_alarm is not None and not self.false_alarms


def deadline(kind: str | None, options: ViewCheckOptions) -> float:
    return (options.frozen_after_s if kind == "frozen" else options.persist_s) + SLACK_S


def clearing(options: ViewCheckOptions) -> float:
    return options.persist_s + 2 * options.interval_s + SLACK_S


def run_sequence(seq: Sequence, options: ViewCheckOptions, size: tuple[int, int] = (320, 240)) -> SequenceResult:
    spec = seq.spec
    result = SequenceResult(seq.name, seq.scenario, spec.category, spec.kind, seq.part, seq.fps)
    monitor = ViewMonitor(options)
    open_kinds: set[str] = set()
    for frame in seq.frames(size):
        when = T0 + dt.timedelta(seconds=frame.t)
        before = monitor.last_check
        started = time.perf_counter()
        transitions = monitor.observe(when, frame.image, frame.boxes)
        elapsed = (time.perf_counter() - started) * 1000
        result.frames += 1
        if monitor.last_check != before:
            result.checks += 1
            result.check_ms.append(elapsed)
        for tr in transitions:
            at = (tr.at - T0).total_seconds()
            if tr.state == "started":
                open_kinds.add(tr.kind)
                result.alarms.append((tr.kind, at))
                _score_alarm(result, seq, tr.kind, at, options)
            else:
                open_kinds.discard(tr.kind)
                result.ends.append((tr.kind, at, tr.reason))
                if spec.restore is not None and tr.kind == spec.kind and at >= spec.restore \
                        and result.time_to_clear is None:
                    result.time_to_clear = at - spec.restore
        if _scored(seq, frame.t, options):
            reported = next((k for k in KINDS if k in open_kinds), "healthy")
            result.confusion[(frame.truth, reported)] += 1
    return result


def _score_alarm(result: SequenceResult, seq: Sequence, kind: str, at: float, options: ViewCheckOptions) -> None:
    spec = seq.spec
    if spec.kind == kind and spec.onset is not None and spec.restore is not None \
            and spec.onset <= at <= spec.restore + clearing(options):
        if result.time_to_alarm is None and at - spec.onset <= deadline(kind, options):
            result.time_to_alarm = at - spec.onset
            return
        if result.time_to_alarm is not None or at - spec.onset > deadline(kind, options):
            if at - spec.onset > deadline(kind, options) and result.time_to_alarm is None:
                return  # late: the sequence fails on time, not on a false alarm
    result.false_alarms.append((kind, at))


def _scored(seq: Sequence, t: float, options: ViewCheckOptions) -> bool:
    spec = seq.spec
    if spec.onset is None or spec.restore is None:
        return True
    if spec.onset <= t < spec.onset + deadline(spec.kind, options):
        return False
    return not spec.restore <= t < spec.restore + clearing(options)
