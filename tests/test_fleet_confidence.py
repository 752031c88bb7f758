"""A fleet's `confidence: high` (apsi.fleets.options.STRETCH): each run under a framework is planned
at the slow end of its calibrated days, a run under the reference arithmetic as it is (with a
note), and each run's slack to its deadline is shown."""

from __future__ import annotations

import pytest

from apsi import fleet, plan
from apsi.fleets.options import STRETCH
from apsi.model.steptime import CALIBRATION_SPREAD


def _data(confidence: str, framework: str | None = None) -> dict:
    runs = [{"name": "a", "params": "llama-3.2-1b", "tokens": "100B", "deadline": "2026-07-20"},
            {"name": "b", "params": "llama-3.2-1b", "tokens": "50B", "after": ["a"]}]
    data = {"fleet": {"start": "2026-07-01", "horizon_days": 90, "gpus": {"H100": 64}, "confidence": confidence},
            "runs": runs}
    if framework:
        data["defaults"] = {"framework": framework}
    return data


def test_the_stretch_is_the_plans_own_slow_end() -> None:
    # A plan's days_high is its days times 1 + the calibration spread's upper end: what a fleet stretches by.
    assert STRETCH == pytest.approx(1 + CALIBRATION_SPREAD[1], rel=1e-12)
    p = plan("llama-3.2-1b", tokens="100B", gpus=16, objective="days")
    assert p.days_high == pytest.approx(p.days * STRETCH, rel=1e-12)


def test_high_confidence_plans_each_run_at_its_slow_end() -> None:
    expected, high = fleet(_data("expected"), jobs=1), fleet(_data("high"), jobs=1)
    assert high.confidence == "high" and expected.confidence == "expected"
    for e, h in zip(expected.runs, high.runs):
        if e.gpus == h.gpus:  # the same option: its days stretched
            assert h.run_days == pytest.approx(e.run_days * STRETCH, rel=1e-9)
    a = high.runs[0]
    assert a.slack_days is not None and a.end is not None and a.deadline is not None
    assert a.slack_days == (a.deadline - a.end).days  # the deadline is its last day, the end its last held
    assert high.runs[1].slack_days is None  # no deadline


def test_under_the_reference_arithmetic_the_days_are_not_widened_and_the_plan_says_so() -> None:
    expected, high = fleet(_data("expected", "reference"), jobs=1), fleet(_data("high", "reference"), jobs=1)
    assert [r.run_days for r in high.runs] == [r.run_days for r in expected.runs]
    assert any("no calibrated range" in n for n in high.notes)


def test_a_confidence_it_does_not_know_is_one_line() -> None:
    from apsi import ApsiError

    with pytest.raises(ApsiError, match="confidence must be expected .* or high .*, got 'p90'"):
        fleet(_data("p90"), jobs=1)
