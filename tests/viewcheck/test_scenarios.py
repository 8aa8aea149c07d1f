"""Each check on real-photo sequences of the labelled set: the tamper raises its own kind
within the issue's deadline and ends after the view is back; the hard negatives raise
nothing at all. (One sequence per scenario at 0.5 fps; the report runs them all.)"""

from __future__ import annotations

import pytest

from app.tooling.viewcheck.evaluate import clearing, deadline
from app.tooling.viewcheck.scenarios import NEGATIVES, TAMPERS
from app.rules.site.viewchecks import ViewCheckOptions

OPTIONS = ViewCheckOptions()


@pytest.mark.parametrize("scenario", [s.name for s in TAMPERS])
def test_a_tamper_raises_its_kind_in_time_and_ends(scenario_result, scenario):
    spec = next(s for s in TAMPERS if s.name == scenario)
    r = scenario_result(scenario)
    assert [k for k, _ in r.alarms] == [spec.kind], r.alarms
    (_, at), = r.alarms
    assert spec.onset <= at <= spec.onset + deadline(spec.kind, OPTIONS)
    if spec.kind != "frozen":  # frozen needs frozen_after_s by definition
        assert at - spec.onset >= OPTIONS.persist_s - OPTIONS.interval_s  # persistence held
    ended = [(k, t, why) for k, t, why in r.ends if k == spec.kind]
    assert len(ended) == 1 and ended[0][2] == "healthy"
    assert spec.restore <= ended[0][1] <= spec.restore + clearing(OPTIONS)
    assert r.passed


@pytest.mark.parametrize("scenario", [s.name for s in NEGATIVES])
def test_a_hard_negative_raises_nothing(scenario_result, scenario):
    r = scenario_result(scenario)
    assert r.alarms == [] and r.false_alarms == []
    assert r.checks >= 95  # the sequence really ran through the checks (>= 190 s at one check per frame)


def test_the_confusion_counts_every_scored_frame(scenario_result):
    r = scenario_result("moved_shift")
    assert r.confusion[("moved", "moved")] > 0 and r.confusion[("healthy", "healthy")] > 0
    assert sum(n for (truth, rep), n in r.confusion.items() if truth != rep) == 0
