"""The fleet program's greedy schedule as its incumbent (apsi.fleets.program.schedule): a stage
whose search finds nothing in its time keeps the greedy schedule where that places every required
run, so a fleet always gets a schedule when one is known; and a fleet with none exits non-zero."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from apsi.fleets import program
from apsi.fleets.tables import Option, Program, ProgramRun
from tests.test_fleet_program import random_program, stage_values, valid


def test_a_stage_value_is_the_oracles_on_greedy_schedules() -> None:
    # program.stage_value against the brute-force oracle's own arithmetic (test_fleet_program),
    # on the greedy schedule of 300 random small fleets; each complete one keeps every rule.
    rng = random.Random(40)
    checked = 0
    for _ in range(300):
        p = random_program(rng)
        choice, start = program.greedy(p)
        if not program.complete(p, choice):
            continue
        checked += 1
        assert valid(p, choice, start)
        for name in program.STAGES:
            assert (program.stage_value(p, name, choice, start),) == stage_values(p, choice, start, (name,))
    assert checked >= 100  # 136 of the 300 are complete


def _big(n: int) -> Program:
    """n runs of 1 to 4 weeks on 64 to 512 of 2,048 GPUs of one type over a year, some after others."""
    rng = random.Random(n)
    runs = []
    for r in range(n):
        options = [Option(gpu_type="H100", gpus=g, days=rng.randint(7, 28) * 256 // g, cost=g * 10)
                   for g in (256, 512)]
        after = [rng.randrange(r)] if r and rng.random() < 0.2 else []
        runs.append(ProgramRun(name=f"run{r}", options=options, deadline=rng.randint(60, 365), after=after))
    return Program(runs=runs, capacity={"H100": (2048,) * 365})


def test_a_search_that_finds_nothing_in_its_time_keeps_the_greedy_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every stage given a microsecond: CP-SAT finds no schedule; the answer is the greedy one,
    # FEASIBLE (not a proof), and every rule kept.
    p = _big(120)
    first = program.greedy(p)
    assert program.complete(p, first[0])
    real = program.solver
    monkeypatch.setattr(program, "solver", lambda seconds, gap=0.0: real(1e-6, gap))
    s = program.schedule(p, ("deadlines", "makespan"), time_limit_s=5.0)
    # (after the stages each run ends as soon as it can alone: apsi.fleets.early.finish)
    done = program.finish(p, *first)
    assert s.status == "FEASIBLE" and (s.choice, s.start) == (done["choice"], done["start"])
    assert valid(p, s.choice, s.start)
    # The first stage keeps the greedy schedule, at the finished schedule's value; the next, given
    # no time either, improves on nothing and says so (UNKNOWN, no bound), with that schedule's value.
    assert (s.stages[0].status, s.stages[0].value) == ("FEASIBLE", program.stage_value(p, "deadlines", *first))
    assert s.stages[0].bound is None or s.stages[0].bound <= s.stages[0].value
    assert [(st.status, st.value, st.bound) for st in s.stages[1:]] == [
        ("UNKNOWN", program.stage_value(p, "makespan", s.choice, s.start), None)]


def test_the_stage_values_are_those_of_the_finished_schedule(monkeypatch: pytest.MonkeyPatch) -> None:
    # Found among test_fleet_program's random programs: the greedy schedule puts the optional r0 on
    # B from day 3 (ending day 4, the last end), where finishing moves it to day 1 (r1, after it, is
    # left out), so the schedule shown ends on day 3. A stage given no time keeps the greedy schedule
    # and was reported at its value, 4, against the schedule the plan shows.
    p = Program(runs=[
        ProgramRun(name="r0", options=[Option(gpu_type="B", gpus=2, days=1, cost=3),
                                       Option(gpu_type="H", gpus=8, days=3, cost=27)],
                   start_after=1, deadline=4, weight=3, optional=True),
        ProgramRun(name="r1", options=[Option(gpu_type="H", gpus=4, days=3, cost=13),
                                       Option(gpu_type="B", gpus=2, days=3, cost=9)],
                   start_after=2, deadline=5, weight=3, optional=True, after=[0]),
        ProgramRun(name="r2", options=[Option(gpu_type="H", gpus=2, days=3, cost=7),
                                       Option(gpu_type="B", gpus=2, days=3, cost=6)], deadline=3, weight=3)],
        capacity={"H": (2, 2, 2, 2), "B": (2, 2, 2, 8)}, power_w={"H": 2, "B": 1}, power_cap_w=8)
    first = program.greedy(p)
    assert program.stage_value(p, "makespan", *first) == 4
    real = program.solver
    monkeypatch.setattr(program, "solver", lambda seconds, gap=0.0: real(1e-6, gap))
    s = program.schedule(p, ("makespan", "tardiness"), time_limit_s=5.0)
    assert valid(p, s.choice, s.start)
    assert tuple(st.value for st in s.stages) == stage_values(p, s.choice, s.start, ("makespan", "tardiness")) == (3, 0)
    # Tardiness 0 is the least it can be: proved, whatever the search did in its time.
    assert (s.stages[1].status, s.stages[1].bound) == ("OPTIMAL", 0)


def test_a_fleet_with_no_schedule_exits_non_zero(tmp_path: Path) -> None:
    # Two runs that each need the fleet's 8 GPUs for about 53 days (Llama 3.1 8B, 300B tokens,
    # under the reference arithmetic) in a 60-day horizon: each fits alone, not both. The plan and
    # its conflict are printed; the command says why on one line and exits 3, --fail-on-miss or not.
    spec = tmp_path / "fleet.yaml"
    spec.write_text("defaults:\n  framework: reference\nfleet:\n  start: 2027-01-01\n  end: 2027-03-01\n"
                    "  gpus:\n    H100: 8\nruns:\n"
                    "  - {name: first, params: llama-3.1-8b, tokens: 300B}\n"
                    "  - {name: second, params: llama-3.1-8b, tokens: 300B}\n", encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "apsi", "fleet", str(spec)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 3, done.stdout + done.stderr
    assert done.stderr.startswith("error: the required runs cannot all be scheduled: first and second")
    assert len(done.stderr.strip().splitlines()) == 1 and "Conflict:" in done.stdout


def test_when_the_soonest_ends_crowd_a_run_out_the_leanest_options_leave_it_room() -> None:
    # 16 GPUs for 10 days. Run a (deadline first) can take 16 GPUs for 4 days or 4 GPUs for 10;
    # run b needs 12 GPUs for 10 days. Ending a soonest (16 x 4) leaves b no 10-day stretch; the
    # leanest option (4 x 10: 40 GPU-days against 64) lets both run side by side.
    p = Program(runs=[ProgramRun(name="a", deadline=10, options=[Option(gpu_type="H", gpus=16, days=4, cost=64),
                                                                 Option(gpu_type="H", gpus=4, days=10, cost=40)]),
                      ProgramRun(name="b", options=[Option(gpu_type="H", gpus=12, days=10, cost=120)])],
                capacity={"H": (16,) * 10})
    soonest, lean = program.greedy(p), program.greedy(p, lean=True)
    assert not program.complete(p, soonest[0]) and program.complete(p, lean[0])
    assert lean == ([1, 0], [0, 0]) and valid(p, *lean)
    s = program.schedule(p, ("deadlines", "cost"), time_limit_s=10.0)
    assert s.status == "OPTIMAL" and s.choice == [1, 0]


def test_no_schedule_in_the_time_names_the_runs_the_greedy_schedule_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    # Three runs on 8 GPUs for 2 days then 4 (found among the random programs of
    # test_fleet_program): a schedule exists (r2 on 4 GPUs for days 0-2 beside r1's day 0, r0 on
    # 2 GPUs from day 2), but list scheduling places r1 and then has no room for r2 on either rule.
    # With no time for the search the answer is UNKNOWN and says which runs the greedy left out.
    H = "H100"
    p = Program(runs=[
        ProgramRun(name="r0", options=[Option(gpu_type=H, gpus=8, days=2, cost=16), Option(gpu_type=H, gpus=2, days=2, cost=4)],
                   deadline=4, start_after=2),
        ProgramRun(name="r1", options=[Option(gpu_type=H, gpus=4, days=1, cost=4), Option(gpu_type=H, gpus=4, days=3, cost=12)],
                   deadline=3),
        ProgramRun(name="r2", options=[Option(gpu_type=H, gpus=4, days=3, cost=12), Option(gpu_type=H, gpus=8, days=2, cost=16)]),
    ], capacity={H: (8, 8, 4, 4, 4, 4)})
    assert not program.complete(p, program.greedy(p)[0]) and not program.complete(p, program.greedy(p, lean=True)[0])
    solved = program.schedule(p, ("deadlines",), time_limit_s=5.0)
    assert solved.status == "OPTIMAL" and program.complete(p, solved.choice)  # the schedule exists
    real = program.solver
    monkeypatch.setattr(program, "solver", lambda seconds, gap=0.0: real(1e-6, gap))
    s = program.schedule(p, ("deadlines",), time_limit_s=5.0)
    # (of the two greedy rules, the one that places more runs; here they place as many)
    assert s.status == "UNKNOWN" and s.choice == [] and s.unplaced == [
        r for r, c in enumerate(program.greedy(p)[0]) if c < 0]
    assert len(s.unplaced) == 1


def test_the_stages_after_one_the_time_stopped_are_listed_at_the_schedules_values(monkeypatch: pytest.MonkeyPatch) -> None:
    # The first stage solved, every later one given a microsecond: the second stopped the stages
    # and the third was not listed at all. Each is now listed, UNKNOWN, at the schedule's value.
    p = _big(60)
    real = program.solver
    calls = []

    def timed(seconds: float, gap: float = 0.0):  # type: ignore[no-untyped-def]
        calls.append(seconds)
        return real(seconds if len(calls) == 1 else 1e-6, gap)

    monkeypatch.setattr(program, "solver", timed)
    s = program.schedule(p, ("deadlines", "tardiness", "makespan"), time_limit_s=20.0)
    assert s.status == "FEASIBLE" and [st.name for st in s.stages] == ["deadlines", "tardiness", "makespan"]
    assert [st.value for st in s.stages] == [program.stage_value(p, n, s.choice, s.start)
                                             for n in ("deadlines", "tardiness", "makespan")]
    assert s.stages[2].status == "UNKNOWN" and s.stages[2].bound is None


def test_a_first_stage_without_any_schedule_searches_on_to_its_first(monkeypatch) -> None:
    # With no greedy schedule to fall back on, the first stage had its equal share of the limit (a
    # fifth, with five stages) and, finding nothing, ended the search with the rest unused, saying
    # no schedule was found "within the time limit". Now a stage that finds none in its share
    # searches on with all that is left, to its first schedule (the stages after then share the
    # rest). Here its share is made too short to find one.
    a = ProgramRun(name="a", options=[Option(gpu_type="H", gpus=8, days=5, cost=0),
                                      Option(gpu_type="H", gpus=4, days=10, cost=0)])
    b = ProgramRun(name="b", options=[Option(gpu_type="H", gpus=4, days=10, cost=0)])
    p = Program(runs=[a, b], capacity={"H": (8,) * 10})
    assert not program.complete(p, program.greedy(p)[0]) and not program.complete(p, program.greedy(p, lean=True)[0])
    given: list[tuple[float, bool]] = []
    real = program.solver

    def timed(seconds: float, gap: float = 0.0):
        cp = real(seconds if given else 1e-9, gap)  # the first search: no time to find anything
        if not given:
            # (and no search at all: within 1e-9 s a loaded machine's first search had found one)
            cp.parameters.stop_after_presolve = True
        given.append((seconds, False))
        return cp

    monkeypatch.setattr(program, "solver", timed)
    s = program.schedule(p, ("deadlines", "tardiness", "optional", "cost", "makespan"), time_limit_s=10.0)
    assert s.choice == [1, 0] and s.stages[0].value == 0
    # The second search of the first stage had what was left, all but a hair of the limit.
    assert given[1][0] > 0.9 * 10.0 * (1 - program.COMPACTION_RESERVE), given
