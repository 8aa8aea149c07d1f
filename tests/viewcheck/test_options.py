"""The ``view_checks:`` options: defaults are on and conservative, invalid values are
refused with the field named (as the site file reports its errors)."""

from __future__ import annotations

import pytest

from app.rules.logic.view import KINDS, ViewCheckConfigError, ViewCheckOptions, parse_options
from app.rules.site.viewchecks import THRESHOLDS


def test_defaults_are_on_with_every_check():
    opts = parse_options(None)
    assert opts == ViewCheckOptions() == parse_options({})
    assert opts.enabled and opts.checks == list(KINDS) and opts.sensitivity == "normal"
    assert (opts.interval_s, opts.persist_s, opts.frozen_after_s) == (2.0, 10.0, 60.0)


def test_valid_values_are_kept():
    opts = parse_options({"enabled": False, "sensitivity": "low", "checks": ["covered", "frozen"], "interval_s": 1,
                          "persist_s": 30, "frozen_after_s": 120.5, "learn_s": 300, "max_gap_s": 120,
                          "veto_area": 0.5, "veto_confidence": 0.6})
    assert opts.checks == ["covered", "frozen"] and opts.interval_s == 1.0 and opts.thresholds == THRESHOLDS["low"]


@pytest.mark.parametrize("data, field", [
    ({"persist_s": -1}, "view_checks.persist_s"),
    ({"persist_s": 601}, "view_checks.persist_s"),
    ({"interval_s": 0.1}, "view_checks.interval_s"),
    ({"interval_s": "2"}, "view_checks.interval_s"),  # strict: no text for numbers
    ({"frozen_after_s": float("nan")}, "view_checks.frozen_after_s"),
    ({"frozen_after_s": 5}, "view_checks.frozen_after_s"),
    ({"learn_s": 1e9}, "view_checks.learn_s"),
    ({"veto_area": 0}, "view_checks.veto_area"),
    ({"veto_confidence": 1.5}, "view_checks.veto_confidence"),
    ({"enabled": "yes"}, "view_checks.enabled"),
    ({"sensitivity": "paranoid"}, "view_checks.sensitivity"),
    ({"checks": []}, "view_checks.checks"),
    ({"checks": ["covered", "covered"]}, "view_checks.checks"),
    ({"checks": ["covered", "smoke"]}, "view_checks.checks.1"),
    ({"checks": "covered"}, "view_checks.checks"),
    ({"interval_s": 5, "max_gap_s": 4}, "view_checks.max_gap_s"),
    ({"persist": 10}, "view_checks.persist"),  # a typo is an error, not a silent default
])
def test_invalid_values_are_refused_with_the_field_named(data, field):
    with pytest.raises(ViewCheckConfigError) as err:
        parse_options(data)
    assert [e["field"] for e in err.value.errors] == [field]
    assert field in str(err.value) and err.value.errors[0]["message"]


def test_the_prefix_names_the_camera():
    with pytest.raises(ViewCheckConfigError) as err:
        parse_options({"persist_s": -1}, where="cameras.gate-1.view_checks")
    assert err.value.errors[0]["field"] == "cameras.gate-1.view_checks.persist_s"


def test_not_a_mapping_is_refused():
    with pytest.raises(ViewCheckConfigError) as err:
        parse_options(["covered"])  # type: ignore[arg-type]
    assert err.value.errors == [{"field": "view_checks", "message": "must be a mapping"}]


def test_several_errors_are_all_reported():
    with pytest.raises(ViewCheckConfigError) as err:
        parse_options({"persist_s": -1, "sensitivity": "max"})
    assert sorted(e["field"] for e in err.value.errors) == ["view_checks.persist_s", "view_checks.sensitivity"]


def test_options_are_frozen():
    with pytest.raises(Exception):
        ViewCheckOptions().persist_s = 3  # type: ignore[misc]


def test_sensitivity_orders_every_threshold():
    """high is more sensitive than normal, normal than low, threshold by threshold."""
    low, normal, high = THRESHOLDS["low"], THRESHOLDS["normal"], THRESHOLDS["high"]
    fire_when_below = ("covered_still", "covered_detail", "smeared_detail", "smeared_texture", "smeared_dim", "moved_gate",
                       "replaced_structure", "defocus_sharpness", "frozen_tolerance")
    fire_when_above = ("blinded_saturated", "moved_aligned", "moved_shift", "moved_angle")
    for name in fire_when_below:
        assert getattr(low, name) < getattr(normal, name) < getattr(high, name), name
    for name in fire_when_above:
        assert getattr(low, name) > getattr(normal, name) > getattr(high, name), name
    assert set(fire_when_below + fire_when_above) == set(low.__dataclass_fields__)
