"""The infeasibility analysis (apsi.fleets.conflicts): a minimal conflicting set, and remedies that
make the fleet feasible when applied."""

from __future__ import annotations

import random

import pytest

from apsi.fleets.conflicts import analyse, apply, holds
from apsi.fleets.program import schedule
from apsi.fleets.tables import Option, Program, ProgramRun


def _run(name, gpus, days, deadline=None, after=(), gpu_type="H"):
    return ProgramRun(name=name, options=[Option(gpu_type=gpu_type, gpus=gpus, days=days, cost=gpus * days)],
                      deadline=deadline, after=list(after))


def test_two_deadlines_conflict_and_a_third_is_not_named():
    # 8 GPUs for 10 days. a and b each need all 8 for 3 days and must end by day 4: only one can.
    # c (8 GPUs, 2 days, deadline 10) fits after either: it is not part of the conflict.
    p = Program(runs=[_run("a", 8, 3, 4), _run("b", 8, 3, 4), _run("c", 8, 2, 10)],
                capacity={"H": (8,) * 10}, node_gpus={"H": 8})
    found = analyse(p)
    assert found is not None and found.members == [0, 1] and found.minimal
    by_kind = {(r.kind, r.run if r.kind == "deadline" else r.gpu_type): r for r in found.remedies}
    # One more node of 8 lets both run at once (16 GPUs); either deadline 2 days later (day 6) lets
    # them run one after the other (days 0-3 and 3-6).
    assert by_kind[("gpus", "H")].gpus == 8
    assert by_kind[("deadline", 0)].days == 2 and by_kind[("deadline", 1)].days == 2
    for remedy in found.remedies:
        assert holds(apply(p, remedy), "deadlines", 5.0)
        assert schedule(apply(p, remedy), ("deadlines", "cost")).stages[0].value == 0


def test_runs_that_do_not_fit_the_horizon():
    # 6 days of 8 GPUs; a and b each hold 8 GPUs for 4 days: both cannot be done in the horizon.
    p = Program(runs=[_run("a", 8, 4), _run("b", 8, 4)], capacity={"H": (8,) * 6}, node_gpus={"H": 8})
    assert schedule(p, ("cost",)).status == "INFEASIBLE"
    found = analyse(p)
    assert found is not None and found.kind == "runs" and found.members == [0, 1]
    # One more node lets both run at once; or 2 more days let them run one after the other (0-4, 4-8).
    assert [(r.kind, r.gpu_type, r.gpus, r.days) for r in found.remedies] == [("gpus", "H", 8, None),
                                                                               ("horizon", None, None, 2)]
    for remedy in found.remedies:
        assert schedule(apply(p, remedy), ("cost",)).status == "OPTIMAL"

    # An optional run with no option (it fits no GPU type: apsi.fleets.api leaves its options
    # empty) changes neither the conflict nor the horizon bound.
    idle = ProgramRun(name="idle", options=[], optional=True)
    found = analyse(Program(runs=[_run("a", 8, 4), _run("b", 8, 4), idle], capacity={"H": (8,) * 6},
                            node_gpus={"H": 8}))
    assert found is not None and found.members == [0, 1]
    assert [(r.kind, r.days) for r in found.remedies if r.kind == "horizon"] == [("horizon", 2)]


def test_the_fleets_answer_routes_the_analysis_to_its_kind():
    # fleet() knows whether the required runs were placed: the analysis gives that kind all its
    # time (a 60-run fleet's whole-set check, at half the time shared as a deletion test's, found
    # nothing and named a deadline instead of the runs that did not fit).
    p = Program(runs=[_run("a", 8, 4, 3), _run("b", 8, 4)], capacity={"H": (8,) * 6}, node_gpus={"H": 8})
    runs = analyse(p, scheduled=False)
    assert runs is not None and runs.kind == "runs" and runs.members == [0, 1]
    # Placed (a's deadline aside): the deadlines' conflict alone, a's that no schedule meets.
    fits = p.model_copy(update={"capacity": {"H": (8,) * 12}})
    late = analyse(fits, scheduled=True)
    assert late is not None and late.kind == "deadlines" and late.members == [0]
    assert analyse(fits, scheduled=False) is None  # every required run fits: no runs conflict


def test_no_conflict_when_all_deadlines_hold():
    p = Program(runs=[_run("a", 8, 3, 3), _run("b", 8, 3, 6)], capacity={"H": (8,) * 6})
    assert analyse(p) is None


@pytest.mark.parametrize("seed", range(30))
def test_random_conflicts_are_minimal_and_remedies_resolve_them(seed):
    rng = random.Random(1000 + seed)
    runs = []
    for r in range(rng.randint(3, 5)):
        gpus = rng.choice([4, 8])
        days = rng.randint(2, 4)
        runs.append(_run(f"r{r}", gpus, days, rng.choice([None, days + rng.randint(0, 3)]),
                         after=[r - 1] if r and rng.random() < 0.3 else []))
    p = Program(runs=runs, capacity={"H": (8,) * 12}, node_gpus={"H": 4})
    found = analyse(p)
    if found is None:
        assert holds(p, "runs", 5.0) and holds(p, "deadlines", 5.0)
        return
    assert found.minimal

    # Minimal: the set alone conflicts, and without any one member the rest hold. A rule left out is
    # a run made optional (kind runs) or a deadline dropped (kind deadlines).
    def only(members):
        free = {"optional": True} if found.kind == "runs" else {"deadline": None}
        return p.model_copy(update={"runs": [run if q in members else run.model_copy(update=free)
                                             for q, run in enumerate(p.runs)]})

    assert not holds(only(found.members), found.kind, 5.0)
    for r in found.members:
        assert holds(only([q for q in found.members if q != r]), found.kind, 5.0)
    assert found.remedies, found
    for remedy in found.remedies:
        # More GPUs and a longer horizon resolve every conflict; a later deadline, the one named.
        assert holds(apply(p if remedy.kind != "deadline" else only(found.members), remedy), found.kind, 5.0)
        if found.kind == "runs":
            assert schedule(apply(p, remedy), ("cost",)).status == "OPTIMAL"


def test_a_run_above_the_power_cap_is_named_with_the_cap(apsi, tmp_path):
    # One node of H100 draws 8 x 700 W x PUE 1.3 = 7.28 kW (apsi.fleets.api._program's power_w);
    # under a 1 kW cap no option of the run fits on any day: the conflict says so, where it blamed
    # the horizon.
    path = tmp_path / "f.yaml"
    path.write_text("defaults: {framework: reference}\n"
                    "fleet: {start: 2026-07-01, horizon_days: 60, gpus: {H100: 256}, power_cap_mw: 0.001}\n"
                    "runs:\n  - {name: a, params: 1B, tokens: 100B}\n")
    run = apsi("fleet", str(path))
    assert run.code == 3, run.why()
    assert ("Conflict: a cannot be scheduled under the 0.001 MW power cap: its least option, 8 x H100, draws "
            "0.00728 MW (board power x PUE).") in run.out
