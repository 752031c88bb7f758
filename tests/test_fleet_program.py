"""The fleet program (apsi.fleets.program) against a brute-force enumeration of every option and
start day on small random fleets (a third under a power cap): the lexicographic optimum of each
objective list is the same, and after the stages no run could end sooner alone (apsi.fleets.early)."""

from __future__ import annotations

import itertools
import random

import pytest

from apsi.fleets.program import schedule
from apsi.fleets.tables import Option, Program, ProgramRun

OBJECTIVES = [
    ("deadlines", "cost"),
    ("tardiness", "cost"),
    ("deadlines", "makespan", "cost"),
    ("deadlines", "optional", "cost"),
    ("optional", "tardiness"),
    ("makespan",),
    ("cost", "deadlines"),
]
"""Objective lists the fleets are solved under: every stage of apsi.fleets.program appears."""


def random_program(rng: random.Random) -> Program:
    """2-4 runs, 1-2 GPU types, a horizon of 4-7 days, capacities that may change once."""
    horizon = rng.randint(4, 7)
    types = ["H", "B"][: rng.randint(1, 2)]
    capacity = {}
    for t in types:
        first = rng.choice([0, 2, 4, 8])
        later = rng.choice([2, 4, 8])
        change = rng.randint(1, horizon - 1)
        capacity[t] = tuple(first if d < change else later for d in range(horizon))
    runs = []
    n = rng.randint(2, 4)
    for r in range(n):
        options = []
        for _ in range(rng.randint(1, 2)):
            gpus = rng.choice([2, 4, 8])
            days = rng.randint(1, 3)
            options.append(Option(gpu_type=rng.choice(types), gpus=gpus, days=days,
                                  cost=gpus * days + rng.randint(0, 3)))
        start_after = rng.choice([0, 0, 1, 2])
        deadline = rng.choice([None, start_after + rng.randint(1, 4)])
        after = sorted(rng.sample(range(r), k=min(r, rng.choice([0, 0, 1])))) if r else []
        runs.append(ProgramRun(name=f"r{r}", options=options, start_after=start_after, deadline=deadline,
                               weight=rng.randint(1, 3), optional=rng.random() < 0.3, after=after))
    if rng.random() < 0.3:  # a power cap: each GPU draws 1-3 units, the cap 8-24 units
        return Program(runs=runs, capacity=capacity, power_w={t: rng.randint(1, 3) for t in types},
                       power_cap_w=rng.choice([8, 16, 24]))
    return Program(runs=runs, capacity=capacity)


def stage_values(p: Program, choice: list[int], start: list[int], stages: tuple[str, ...]) -> tuple[int, ...]:
    """Each stage's objective at a schedule, as apsi.fleets.program defines it (module docstring)."""
    out = []
    present = [c >= 0 for c in choice]
    end = [s + (p.runs[r].options[c].days if c >= 0 else 0) for r, (c, s) in enumerate(zip(choice, start))]
    for name in stages:
        if name == "deadlines":
            out.append(sum(run.weight for r, run in enumerate(p.runs)
                           if present[r] and run.deadline is not None and end[r] > run.deadline))
        elif name == "tardiness":
            out.append(sum(run.weight * max(0, end[r] - run.deadline) for r, run in enumerate(p.runs)
                           if present[r] and run.deadline is not None))
        elif name == "purchase":
            assert not p.buy  # these programs buy nothing (tests/test_fleet_buy.py checks purchases)
            out.append(0)
        elif name == "cost":
            # What is paid beyond what is owned: these programs own every GPU and buy none, so an
            # option's own cost (the worth of its GPU-hours) is not charged.
            assert not p.buy
            out.append(0)
        elif name == "makespan":
            out.append(max([e for e, x in zip(end, present) if x], default=0))
        elif name == "optional":
            out.append(-sum(run.weight for run, x in zip(p.runs, present) if run.optional and x))
        elif name == "moved":  # the runs a saved answer places (option >= 0) elsewhere or on another day
            saved = p.saved or ([], [])
            out.append(sum(1 for r, o in enumerate(saved[0]) if o >= 0 and (choice[r], start[r]) != (o, saved[1][r])))
        elif name == "restarts":
            assert not any(run.elastic for run in p.runs)  # these runs keep one option (test_fleet_elastic checks segments)
            out.append(0)
    return tuple(out)


def brute_force(p: Program, stages: tuple[str, ...]) -> tuple[int, ...] | None:
    """The lexicographic least stage values over every option and start day of every run, or None
    when no schedule exists."""
    horizon = p.horizon_days
    per_run = []
    for run in p.runs:
        choices = [(-1, run.start_after)] if run.optional else []
        for o, opt in enumerate(run.options):
            choices += [(o, s) for s in range(run.start_after, horizon - opt.days + 1)]
        per_run.append(choices)
    best = None
    for combo in itertools.product(*per_run):
        choice = [c for c, _ in combo]
        start = [s for _, s in combo]
        if valid(p, choice, start):
            value = stage_values(p, choice, start, stages)
            best = value if best is None or value < best else best
    return best


def valid(p: Program, choice: list[int], start: list[int]) -> bool:
    """Whether a schedule keeps every rule: required runs present, within the horizon and their
    start_after, GPUs in use within each day's count (and power within the cap), each run after
    the runs it follows."""
    horizon = p.horizon_days
    use = {t: [0] * horizon for t in p.capacity}
    watts = [0] * horizon
    for r, (c, s) in enumerate(zip(choice, start)):
        run = p.runs[r]
        if c < 0:
            if not run.optional:
                return False
            continue
        opt = run.options[c]
        if s < run.start_after or s + opt.days > horizon:
            return False
        for d in range(s, s + opt.days):
            use[opt.gpu_type][d] += opt.gpus
            if use[opt.gpu_type][d] > p.capacity[opt.gpu_type][d]:
                return False
            if p.power_cap_w is not None:
                watts[d] += opt.gpus * p.power_w[opt.gpu_type]
                if watts[d] > p.power_cap_w:
                    return False
        for q in run.after:
            if choice[q] < 0 or s < start[q] + p.runs[q].options[choice[q]].days:
                return False
    return True


@pytest.mark.parametrize("seed", range(220))
def test_program_equals_brute_force(seed):
    rng = random.Random(seed)
    p = random_program(rng)
    stages = OBJECTIVES[seed % len(OBJECTIVES)]
    expected = brute_force(p, stages)
    got = schedule(p, stages, time_limit_s=20)
    if expected is None:
        assert got.status == "INFEASIBLE", got
        return
    assert got.status == "OPTIMAL", got
    assert valid(p, got.choice, got.start), (p, got)
    # The values the program reports are its schedule's (recomputed here), and they are the least.
    assert tuple(s.value for s in got.stages) == stage_values(p, got.choice, got.start, stages)
    assert tuple(s.value for s in got.stages) == expected, (p, got)
    # Compacted: no run could start a day sooner with the others where they are.
    for r, (c, s) in enumerate(zip(got.choice, got.start)):
        if c >= 0 and s > 0:
            sooner = list(got.start)
            sooner[r] = s - 1
            assert not valid(p, got.choice, sooner), (p, got, r)
    assert not ends_sooner_alone(p, got.choice, got.start), (p, got)


def ends_sooner_alone(p: Program, choice: list[int], start: list[int]) -> list[int]:
    """The runs that could end sooner (or as soon on fewer GPU-days) on another option or day, the
    others where they are, by enumeration: the rule apsi.fleets.early applies after the stages."""
    out = []
    for r, c in enumerate(choice):
        if c < 0:
            continue
        now = p.runs[r].options[c]
        key = (start[r] + now.days, now.gpus * now.days)
        for o, opt in enumerate(p.runs[r].options):
            for day in range(p.runs[r].start_after, p.horizon_days - opt.days + 1):
                moved_choice, moved_start = list(choice), list(start)
                moved_choice[r], moved_start[r] = o, day
                if (day + opt.days, opt.gpus * opt.days) < key and valid(p, moved_choice, moved_start):
                    out.append(r)
    return out


def test_each_objective_is_covered():
    names = {name for stages in OBJECTIVES for name in stages}
    assert names == {"deadlines", "tardiness", "cost", "makespan", "optional"}
