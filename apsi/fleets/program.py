"""The fleet program: choose one option per run and a start day for it on a shared GPU inventory, with CP-SAT.

One public function, `schedule`: a `Program` of plain integers in (apsi.fleets.tables: each run's
options as (GPU type, GPUs, days, cost) rows, each GPU type's capacity day by day), a `Schedule`
(chosen option and start per run, each objective stage's value, bound and status) out. No I/O, no
catalog, no frontier: apsi.fleets.options builds the tables from the runs' own frontiers, and the
tests hand it small tables directly. OR-Tools is imported inside the functions.

Time is whole days from the horizon's first day: a run on days [start, start + days) holds its GPUs
on each of those days, and `end` = start + days is the first day it no longer holds them.

Variables, for run r and its option o: start[r], end[r] (days), use[r, o] (the option is chosen),
and present[r] = sum_o use[r, o].

  choice     a required run takes exactly one option, an optional run at most one
  interval   use[r, o] => end[r] = start[r] + days[o]: one optional interval per (r, o)
  capacity   per GPU type, a cumulative of the intervals of its options (demand: GPUs), against the
             most GPUs the type ever has; for each stretch of days with fewer, a fixed interval holds
             the difference (GPUs not there yet, or a reservation over), the pattern of OR-Tools'
             scheduling samples (ortools/sat/samples/ranking_sample_sat.py, cumulative_variable_profile_sample_sat.py)
  window     start[r] >= start_after[r], end[r] <= the horizon
  after      present[r] => present[q] and start[r] >= end[q] for each q that r comes after
  deadline   late[r] is false => end[r] <= deadline[r] (for a run that is present)

Objective stages, each minimised (lexicographic: each stage's optimum is then kept as a
constraint, value <= the best found, and the next stage is solved from the previous solution):

  deadlines  sum of weight x late over the runs with a deadline
  tardiness  sum of weight x max(0, end - deadline)
  cost       sum of the chosen options' cost (whole units: apsi.fleets.tables.Option.cost)
  makespan   the last end of any run present
  optional   minus the weight of the optional runs scheduled (most weight kept)
  starts     the sum of the present runs' starts (the last stage, always: earliest placement among
             equals, so that a plan does not drift)

Deterministic: one search worker and a fixed seed (CP-SAT's parameters num_workers, random_seed),
and the time limit in CP-SAT's deterministic time (max_deterministic_time), so one program gives
one schedule, byte for byte, on every run and machine, even when the limit stops a stage (its
gap is then reported).
"""

from __future__ import annotations

from typing import Any

from apsi.fleets.tables import Program, Schedule, Stage, Status

STAGES = ("deadlines", "tardiness", "cost", "makespan", "optional", "starts")
"""The objective stages the program knows, by name."""
SEED = 0
"""CP-SAT's random_seed: fixed, so the same program gives the same schedule."""
WORKERS = 1
"""CP-SAT's num_workers: one, the setting under which its search is deterministic."""


class Model:
    """The CP-SAT model of a Program: variables named after their meaning, constraints as listed
    in the module docstring. `hard` is for the infeasibility analysis (apsi.fleets.conflicts):
    "runs" makes each required run's being scheduled a literal (`chosen`) to assume, "deadlines"
    each required run's deadline a hard rule under a literal (`met`); `extra` adds whole nodes of
    one GPU type for the whole horizon, as a variable (what would resolve a conflict)."""

    def __init__(self, p: Program, *, hard: str | None = None, extra: str | None = None):
        from ortools.sat.python import cp_model

        self.p = p
        self.m = cp_model.CpModel()
        m = self.m
        horizon = p.horizon_days
        self.start: list[Any] = []
        self.end: list[Any] = []
        self.use: list[list[Any]] = []
        self.present: list[Any] = []
        self.late: dict[int, Any] = {}
        self.chosen: dict[int, Any] = {}  # hard: run r is scheduled (required runs)
        self.met: dict[int, Any] = {}  # hard: run r ends by its deadline
        self.core: list[int] = []  # the assumptions a solve found in conflict (apsi.fleets.conflicts)
        by_type: dict[str, list[tuple[Any, int]]] = {t: [] for t in p.capacity}
        for r, run in enumerate(p.runs):
            s = m.new_int_var(run.start_after, horizon, f"start[{run.name}]")
            e = m.new_int_var(run.start_after, horizon, f"end[{run.name}]")
            uses = []
            for o, opt in enumerate(run.options):
                u = m.new_bool_var(f"use[{run.name},{o}]")
                if run.start_after + opt.days > horizon or opt.gpu_type not in p.capacity:
                    m.add(u == 0)  # the option cannot end within the horizon
                interval = m.new_optional_interval_var(s, opt.days, e, u, f"run[{run.name},{o}]")
                if opt.gpu_type in by_type:
                    by_type[opt.gpu_type].append((interval, opt.gpus))
                uses.append(u)
            present = m.new_bool_var(f"present[{run.name}]")
            m.add(sum(uses) == present)
            if hard == "runs" and not run.optional:
                self.chosen[r] = m.new_bool_var(f"scheduled[{run.name}]")
                m.add_implication(self.chosen[r], present)
            elif not run.optional:
                m.add(present == 1)
            # An absent run sits at its earliest day, so that its variables take one value.
            m.add(s == run.start_after).only_enforce_if(present.Not())
            m.add(e == run.start_after).only_enforce_if(present.Not())
            self.start.append(s)
            self.end.append(e)
            self.use.append(uses)
            self.present.append(present)
        for r, run in enumerate(p.runs):
            for q in run.after:
                # A run after q needs q scheduled, and starts on or after the day q ends.
                m.add_implication(self.present[r], self.present[q])
                m.add(self.start[r] >= self.end[q]).only_enforce_if(self.present[r])
            if run.deadline is not None:
                if hard == "deadlines" and not run.optional:
                    self.met[r] = m.new_bool_var(f"met[{run.name}]")
                    m.add(self.end[r] <= run.deadline).only_enforce_if(self.met[r])
                late = m.new_bool_var(f"late[{run.name}]")
                m.add(self.end[r] <= run.deadline).only_enforce_if([self.present[r], late.Not()])
                m.add(late == 0).only_enforce_if(self.present[r].Not())
                self.late[r] = late
        self.extra_nodes = None
        for t, days in p.capacity.items():
            most = max(days)
            capacity: Any = most
            if t == extra:
                node = p.node_gpus.get(t, 1)
                bound = sum(max((o.gpus for o in run.options if o.gpu_type == t), default=0) for run in p.runs)
                self.extra_nodes = m.new_int_var(0, -(-bound // node), f"extra_nodes[{t}]")
                capacity = most + node * self.extra_nodes
            intervals = [i for i, _ in by_type[t]]
            demands = [d for _, d in by_type[t]]
            for first, last, short in _shortfalls(days):
                # Fewer GPUs on days [first, last): a fixed interval holds the missing ones.
                intervals.append(m.new_fixed_size_interval_var(first, last - first, f"absent[{t},{first}]"))
                demands.append(short)
            if intervals:
                m.add_cumulative(intervals, demands, capacity)

    def objective(self, stage: str) -> Any:
        """The linear expression stage `stage` minimises."""
        p, m = self.p, self.m
        if stage == "deadlines":
            return sum(p.runs[r].weight * late for r, late in self.late.items())
        if stage == "tardiness":
            terms = []
            for r in self.late:
                run = p.runs[r]
                assert run.deadline is not None
                tardy = m.new_int_var(0, p.horizon_days, f"tardy[{run.name}]")
                m.add(tardy >= self.end[r] - run.deadline)
                terms.append(run.weight * tardy)
            return sum(terms)
        if stage == "cost":
            return sum(opt.cost * u for run, uses in zip(p.runs, self.use) for opt, u in zip(run.options, uses))
        if stage == "makespan":
            last = m.new_int_var(0, p.horizon_days, "makespan")
            for e, present in zip(self.end, self.present):
                m.add(last >= e).only_enforce_if(present)
            return last
        if stage == "optional":
            return -sum(run.weight * x for run, x in zip(p.runs, self.present) if run.optional)
        if stage == "starts":
            return sum(s for s in self.start)
        raise AssertionError(stage)


def _shortfalls(days: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """(first, last, GPUs short) for each maximal stretch of days with the same count below the
    most the type ever has."""
    most = max(days)
    out: list[tuple[int, int, int]] = []
    first = 0
    for t in range(1, len(days) + 1):
        if t == len(days) or days[t] != days[first]:
            if days[first] < most:
                out.append((first, t, most - days[first]))
            first = t
    return out


def solver(work_s: float) -> Any:
    """A CP-SAT solver with the fleet's deterministic parameters and a budget of `work_s` of
    CP-SAT's deterministic time (as apsi.solver does: a search cut short stops at the same point
    on every run and machine), the wall clock only a backstop well above it."""
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    solver.parameters.num_workers = WORKERS
    solver.parameters.random_seed = SEED
    solver.parameters.max_deterministic_time = max(1e-3, work_s)
    solver.parameters.max_time_in_seconds = 6 * max(1e-3, work_s) + 1
    return solver


def schedule(p: Program, stages: tuple[str, ...], time_limit_s: float = 30.0) -> Schedule:
    """The lexicographic optimum of `stages` (then `starts`) for program `p`: each stage solved in
    turn, its best value kept as a constraint for the next, each stage given an equal share of the
    budget left (`time_limit_s` of CP-SAT's deterministic time, about a second of one core's
    search each). INFEASIBLE when the required runs cannot all be scheduled within the horizon."""
    from ortools.sat.python import cp_model

    for name in stages:
        assert name in STAGES, name
    order = tuple(dict.fromkeys((*stages, "starts")))
    model = Model(p)
    work = 0.0
    done: list[Stage] = []
    solution: tuple[list[int], list[int]] | None = None
    for k, name in enumerate(order):
        expr = model.objective(name)
        model.m.minimize(expr)
        if solution is not None:
            model.m.clear_hints()
            _hint(model, solution)
        cp = solver((time_limit_s - work) / (len(order) - k))
        status = cp.solve(model.m)
        work += cp.response_proto.deterministic_time
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            if solution is None:
                word: Status = "INFEASIBLE" if status == cp_model.INFEASIBLE else "UNKNOWN"
                return Schedule(status=word, stages=[Stage(name=name, status=word)], choice=[], start=[], work_s=work)
            # The time ran out before this stage improved on the previous one's answer: keep it.
            done.append(Stage(name=name, status="UNKNOWN", value=None, bound=None))
            break
        value = int(round(cp.objective_value))
        bound = int(round(cp.best_objective_bound))
        proof: Status = "OPTIMAL" if status == cp_model.OPTIMAL else "FEASIBLE"
        done.append(Stage(name=name, status=proof, value=value, bound=bound))
        solution = ([next((o for o, u in enumerate(uses) if cp.value(u)), -1) for uses in model.use],
                    [cp.value(s) for s in model.start])
        model.m.add(expr <= value)  # keep this stage's best for the stages after it
    assert solution is not None
    proved = all(s.status == "OPTIMAL" for s in done) and len(done) == len(order)
    return Schedule(status="OPTIMAL" if proved else "FEASIBLE", stages=done, choice=solution[0], start=solution[1],
                    work_s=work)


def _hint(model: Model, solution: tuple[list[int], list[int]]) -> None:
    """The previous stage's answer as the next one's starting point (CP-SAT's add_hint)."""
    choice, start = solution
    for r, uses in enumerate(model.use):
        for o, u in enumerate(uses):
            model.m.add_hint(u, o == choice[r])
        model.m.add_hint(model.start[r], start[r])
