"""Tests for apsi.training.frameworks.kept: a question that differs from an earlier one only in
its target gets the earlier fastest walk's answer, and is then the same, byte for byte, as when
it walks (its Note's memory evaluations, its Why line, the work charged to its budget); a walk
from another state, or on other inputs, is not taken from another question.

The plans compared are plan()'s own, each once with the walks kept and once with them forgotten
before every question: nothing here is a hard-coded answer.
"""

from __future__ import annotations

import pytest

from apsi import plan
from apsi.training.frameworks import kept, planner
from apsi.training.frameworks.budget import Budget

SWEEP = [dict(params="2T", gpu="H100", days=days) for days in (15, 30, 45)]
"""A 2T model on H100 at a 4M-token batch: the fastest layout runs about 2,000 days, so no deadline
of the sweep is met and each plan is the fastest within the cap (checked below)."""


@pytest.fixture
def walks(monkeypatch) -> list:
    """The fastest walks run (kept.walk_fastest's calls) and the budgets made, by the test."""
    calls: list = []
    budgets: list = []
    walk = kept.walk_fastest

    def counted(searches):
        calls.append(len(searches))
        return walk(searches)

    class Recorded(Budget):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            budgets.append(self)

    monkeypatch.setattr(kept, "walk_fastest", counted)
    monkeypatch.setattr(planner, "Budget", Recorded)
    kept.forget()
    yield calls, budgets
    kept.forget()


def _answers(questions: list[dict], forget: bool, budgets: list) -> list[tuple[str, str, int]]:
    """Each plan's JSON and Why line, and the work its budget was charged, in order."""
    out = []
    for question in questions:
        if forget:
            kept.forget()
        p = plan(**question)
        out.append((p.model_dump_json(), p.why, budgets[-1].used))
    return out


def test_a_sweep_of_deadlines_none_meets_walks_once_and_answers_as_walking(walks) -> None:
    calls, budgets = walks
    replayed = _answers(SWEEP, False, budgets)
    assert len(calls) == 1  # the first question walks, the others take its answer
    assert all('"target_met":false' in json for json, _, _ in replayed)
    calls.clear()
    walked = _answers(SWEEP, True, budgets)
    assert len(calls) == len(SWEEP)
    # The same plans (the Note's memory evaluations included), Why lines and work charged.
    assert replayed == walked


def test_other_inputs_walk_again(walks) -> None:
    calls, _ = walks
    plan(**SWEEP[0])
    plan(**dict(SWEEP[1], batch="8M"))  # another batch: other legal dps and durations
    plan(**dict(SWEEP[1], gpu="H200"))  # another GPU type
    plan(**dict(SWEEP[1], max_gpus=4096))  # another cap
    assert len(calls) == 4


def test_a_walk_after_memory_evaluations_is_not_taken_from_another_question(walks) -> None:
    # objective="days" walks the fastest at once; a deadline that some layout nearly meets first
    # walks fewest(), whose memory evaluations the fastest walk then reuses: that state differs,
    # so the kept answer (with its count of evaluations) must not stand in for it. Within 128
    # GPUs memory binds, so fewest() evaluates memory (without a cap its floors rule every layout
    # out first, and the kept answer is rightly taken).
    calls, budgets = walks
    question = dict(params="405B", gpu="H100", tokens="15T", max_gpus=128)
    first = plan(**question, objective="days")
    assert len(calls) == 1
    near = dict(question, days=first.days * 0.999)  # just faster than the fastest: not met
    replayed = _answers([near], False, budgets)
    assert len(calls) == 2  # walked again, not taken from the first
    assert '"target_met":false' in replayed[0][0]
    walked = _answers([near], True, budgets)
    assert replayed == walked
