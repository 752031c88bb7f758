"""The fleet program: choose one option per run and a start day for it on a shared GPU inventory, with CP-SAT.

One public function, `schedule`: a `Program` of plain integers in (apsi.fleets.tables: each run's options as (GPU
type, GPUs, days, cost) rows, each GPU type's capacity day by day), a `Schedule` (chosen option and start per run,
each objective stage's value, bound and status) out. No I/O, no catalog, no frontier: apsi.fleets.options builds the
tables from the runs' own frontiers, and the tests hand it small tables directly. OR-Tools is imported inside the
functions.

Time is whole days from the horizon's first day: a run on days [start, start + days) holds its GPUs
on each of those days, and `end` = start + days is the first day it no longer holds them.

Variables, for run r and its option o: start[r], end[r] (days), use[r, o] (the option is chosen),
and present[r] = sum_o use[r, o].

  choice     a required run takes exactly one option, an optional run at most one
  duration   end[r] = start[r] + sum_o days[o] use[r, o]
  interval   one optional interval per (r, GPU type t), present when an option of t is chosen, its size
             days[r, t] and its demand gpus[r, t] integer variables equal to the chosen option's (0 when
             absent): the options of a type share it (one per option was five times slower:
             docs/benchmarks.md (v))
  capacity   per GPU type, a cumulative of those intervals against the most GPUs the type ever has; for
             each stretch of days with fewer, a fixed interval holds the difference (GPUs not there yet,
             or a reservation over), as OR-Tools' samples model optional intervals and a varying
             capacity (ortools/sat/samples/optional_interval_sample_sat.py, cumulative_variable_profile_sample_sat.py)
  power      with a power cap, one more cumulative of every interval, its demand gpus[r, t] x the
             type's facility watts per GPU, against the cap
  window     start[r] >= start_after[r], end[r] <= the horizon
  started    a run already running: present, start[r] = the day it started (on its one option)
  after      present[r] => present[q] and start[r] >= end[q] for each q that r comes after
  deadline   late[r] is false => end[r] <= deadline[r] (for a run that is present)
  purchase   with Program.buy, nodes[t] whole nodes of type t bought: the type's cumulative
             capacity grows by them, and a fixed interval from day 0 to the offer's first day
             holds them back until they arrive (its demand the same variable)

Objective stages, each minimised (lexicographic: each stage's optimum is then kept as a
constraint, value <= the best found, and the next stage is solved from the previous solution):

  deadlines  sum of weight x late over the runs with a deadline
  tardiness  sum of weight x max(0, end - deadline)
  purchase   sum of the nodes bought x each node's cost (Offer.cost): what is paid beyond what is
             owned (apsi fleet --buy puts it after tardiness: the least purchase meeting every deadline)
  cost       what is paid beyond what is owned: the same sum (0 without Program.buy). The capacity
             is owned, its cost sunk (docs/method.md 4.12), so an option's own cost (Option.cost, the
             value of its GPU-hours) is not charged: a run no longer waits for a cheaper type
  makespan   the last end of any run present (with a redundant bound: the GPU-days held fit in those
             the inventory offers before it)
  optional   minus the weight of the optional runs scheduled (most weight kept)
  restarts   the elastic runs' segments after their first (each a restart): only where a run is elastic
  moved      a re-plan's runs not on their saved option from their saved day (Program.saved): last,
             so that among equal plans the saved one stands (apsi.fleets.replan.moved_from_saved)

After the stages, each run ends as soon as it can with the others where they are (apsi.fleets.early:
it may take another option on GPUs left free, owned or bought, so nothing more is paid), and every run
is moved as early as its rules allow (`compact`: a run moved to an earlier day keeps its option,
so the cost and the optional runs kept do not change, and it ends sooner, so no deadline,
tardiness or makespan gets worse and no run after it is held up), until neither moves a run: among
schedules of equal value, the plan shows one where no run could end sooner alone. Each stage's value
is then its value at that schedule (apsi.fleets.early.revalued: lower than solved where the time
limit stopped a search short, and proved where it falls to the stage's bound).

Deterministic: one search worker and a fixed seed (CP-SAT's parameters num_workers, random_seed),
so a program whose stages are all proved gives one schedule, byte for byte, on every run and
machine. The time limit is wall clock: a stage it stops reports its gap, and only then may the
schedule depend on the machine's speed.
"""

from __future__ import annotations

import math
from typing import Any

from apsi.fleets.buy import with_purchase
from apsi.fleets.early import ends_at, finish, revalued, stage_value
from apsi.fleets.tables import Option, Program, Schedule, Stage, Status

STAGES = ("deadlines", "tardiness", "purchase", "cost", "makespan", "optional", "restarts", "moved")
"""The objective stages the program knows, by name (`restarts` is added after the others where a
run is elastic: schedule())."""
SEED = 0
"""CP-SAT's random_seed: fixed, so the same program gives the same schedule."""
WORKERS = 1
"""CP-SAT's num_workers: one, the setting under which its search is deterministic."""


class Model:
    """The CP-SAT model of a Program: variables named after their meaning, constraints as listed
    in the module docstring. `hard` is for the infeasibility analysis (apsi.fleets.conflicts):
    "runs" makes each required run's being scheduled a literal (`chosen`) to assume, "deadlines"
    each required run's deadline a hard rule under a literal (`met`). The nodes bought of each type
    of Program.buy are `nodes[type]`."""

    def __init__(self, p: Program, *, hard: str | None = None):
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
        self.segments: dict[int, list[Any]] = {}  # an elastic run's segments (apsi.fleets.elastic)
        by_type: dict[str, list[tuple[Any, Any]]] = {t: [] for t in p.capacity}
        self.nodes: dict[str, Any] = {t: m.new_int_var(0, offer.max_nodes, f"nodes[{t}]") for t, offer in p.buy.items()}
        for r, run in enumerate(p.runs):
            s = m.new_int_var(run.start_after, horizon, f"start[{run.name}]")
            e = m.new_int_var(run.start_after, horizon, f"end[{run.name}]")
            present = m.new_bool_var(f"present[{run.name}]")
            if run.elastic:
                # Up to elastic.SEGMENTS segments, each on one option, a restart at each change.
                from apsi.fleets.elastic import add_segments

                uses, self.segments[r] = add_segments(m, run, s, e, present, set(by_type), horizon, by_type,
                                                      self.offered)
            else:
                uses = self._fixed(run, s, e, by_type)
                m.add(sum(uses) == present)
            if hard == "runs" and not run.optional:
                self.chosen[r] = m.new_bool_var(f"scheduled[{run.name}]")
                m.add_implication(self.chosen[r], present)
            elif not run.optional:
                m.add(present == 1)
            if run.started is not None:
                # A run already running stays where it is: present, from the day it started.
                m.add(present == 1)
                m.add(s == run.started)
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
        for t, days in p.capacity.items():
            most = max(days)
            capacity: Any = most
            intervals = [i for i, _ in by_type[t]]
            demands: list[Any] = [d for _, d in by_type[t]]
            offer = p.buy.get(t)
            if offer is not None:
                # Nodes bought are there from the offer's first day to the horizon's end: the
                # capacity grows by them, and a fixed interval before that day holds them back.
                capacity = most + offer.node_gpus * self.nodes[t]
                if offer.from_day > 0:
                    intervals.append(m.new_fixed_size_interval_var(0, offer.from_day, f"not_yet[{t}]"))
                    demands.append(offer.node_gpus * self.nodes[t])
            for first, last, short in _shortfalls(days):
                # Fewer GPUs on days [first, last): a fixed interval holds the missing ones.
                intervals.append(m.new_fixed_size_interval_var(first, last - first, f"absent[{t},{first}]"))
                demands.append(short)
            if intervals:
                m.add_cumulative(intervals, demands, capacity)
        if p.power_cap_w is not None:
            # Every run draws its GPUs' facility power on each day it holds them.
            drawn = [(interval, p.power_w[t] * gpus) for t, held in by_type.items() for interval, gpus in held]
            if drawn:
                m.add_cumulative([i for i, _ in drawn], [w for _, w in drawn], p.power_cap_w)

    def _fixed(self, run: Any, s: Any, e: Any, by_type: dict[str, list[tuple[Any, Any]]]) -> list[Any]:
        """The option Booleans of a run that keeps one option from start to end, its duration and
        its one interval per GPU type (module docstring)."""
        m, horizon = self.m, self.p.horizon_days
        uses = []
        for o, opt in enumerate(run.options):
            u = m.new_bool_var(f"use[{run.name},{o}]")
            if run.start_after + opt.days > horizon or opt.gpu_type not in self.p.capacity:
                m.add(u == 0)  # the option cannot end within the horizon
            self.offered(opt, u)
            uses.append(u)
        # The run lasts its chosen option's days (an absent run none: start = end).
        m.add(e == s + sum(opt.days * u for opt, u in zip(run.options, uses)))
        for t in dict.fromkeys(opt.gpu_type for opt in run.options if opt.gpu_type in by_type):
            # One optional interval per (run, GPU type), present when an option of the type is
            # chosen, its length and GPUs the chosen option's: the options of a type share it.
            mine = [(opt, u) for opt, u in zip(run.options, uses) if opt.gpu_type == t]
            on = m.new_bool_var(f"on[{run.name},{t}]")
            m.add(sum(u for _, u in mine) == on)
            # CP-SAT takes an interval's size and a cumulative's demands as affine expressions:
            # one variable each, over the type's option values (and 0, when absent).
            from ortools.sat.python.cp_model import Domain

            size = m.new_int_var_from_domain(Domain.from_values([0] + [o.days for o, _ in mine]),
                                             f"days[{run.name},{t}]")
            gpus = m.new_int_var_from_domain(Domain.from_values([0] + [o.gpus for o, _ in mine]),
                                             f"gpus[{run.name},{t}]")
            m.add(size == sum(opt.days * u for opt, u in mine))
            m.add(gpus == sum(opt.gpus * u for opt, u in mine))
            interval = m.new_optional_interval_var(s, size, e, on, f"run[{run.name},{t}]")
            by_type[t].append((interval, gpus))
        return uses

    def offered(self, opt: Option, u: Any) -> None:
        """Option `opt` chosen (`u`) only with the nodes bought of its type that keep it (Option.bought_nodes)."""
        if opt.bought_nodes is None:
            return
        n = self.nodes.get(opt.gpu_type)
        if n is not None:
            from ortools.sat.python.cp_model import Domain

            kept = Domain.from_intervals([list(r) for r in opt.bought_nodes])
            self.m.add_linear_expression_in_domain(n, kept).only_enforce_if(u)
        elif not opt.offered(0):
            self.m.add(u == 0)  # nothing of its type may be bought (the least of another type alone)

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
        if stage in ("purchase", "cost"):  # what is paid beyond what is owned (module docstring)
            return sum(p.buy[t].cost * n for t, n in self.nodes.items())
        if stage == "makespan":
            last = m.new_int_var(0, p.horizon_days, "makespan")
            for e, present in zip(self.end, self.present):
                m.add(last >= e).only_enforce_if(present)
            # Redundant, for the bound: the GPU-days the runs hold fit in the GPU-days every type
            # offers before the last end (a table of the running sums, read at `last`). Without it
            # the bound stayed near the longest single run (a 50-run fleet at an 83% gap in 10 s).
            offered = [0]
            for d in range(p.horizon_days):
                # (the most that may be bought counted as there: a bound still, if a weaker one)
                offered.append(offered[-1] + sum(days[d] for days in p.capacity.values())
                               + sum(o.node_gpus * o.max_nodes for o in p.buy.values() if d >= o.from_day))
            room = m.new_int_var(0, offered[-1], "gpu_days_before_makespan")
            m.add_element(last, offered, room)
            # (an elastic run's GPU-days are its segments': left out, the sum is still a bound)
            m.add(sum(opt.gpus * opt.days * u for run, uses in zip(p.runs, self.use) if not run.elastic
                      for opt, u in zip(run.options, uses)) <= room)
            return last
        if stage == "optional":
            return -sum(run.weight * x for run, x in zip(p.runs, self.present) if run.optional)
        if stage == "restarts":  # an elastic run's segments after its first (each a restart)
            return sum(on for segs in self.segments.values() for _, _, _, on in segs[1:])
        if stage == "moved":
            from apsi.fleets.replan import moved_from_saved

            return moved_from_saved(self)
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


def solver(seconds: float, gap: float = 0.0) -> Any:
    """A CP-SAT solver with the fleet's deterministic parameters and a limit of `seconds`, wall
    clock. (CP-SAT's deterministic time, which apsi.training.reference.program budgets, runs far behind the wall clock
    on these models: 1.2 against 31 s on the 50-run benchmark fleet, its cumulative propagation
    mostly uncounted, so it cannot keep a promise of seconds.)"""
    from ortools.sat.python import cp_model

    solver = cp_model.CpSolver()
    solver.parameters.num_workers = WORKERS
    solver.parameters.random_seed = SEED
    # Probing in presolve and the LP relaxation cost more than they save on these models: on the
    # 50-run fleet of benchmarks/fleet_speed.py the cost stage took 10.9 s with probing and 6.2 s
    # without, and 10.9 s with the LP and 5.0 s without (docs/benchmarks.md (v)).
    solver.parameters.cp_model_probing_level = 0
    solver.parameters.linearization_level = 0
    solver.parameters.max_time_in_seconds = max(1e-3, seconds)
    if gap > 0:
        # CP-SAT stops once (value - bound) / value is within it, and calls that OPTIMAL: schedule()
        # reports such a stage FEASIBLE with its gap.
        solver.parameters.relative_gap_limit = gap
    return solver


COMPACTION_RESERVE = 0.02
"""Share of the time limit kept back from the CP-SAT stages for compacting the schedule after them."""


def schedule(p: Program, stages: tuple[str, ...], time_limit_s: float = 30.0, gap: float = 0.0) -> Schedule:
    """The lexicographic optimum of `stages` for program `p`, compacted: each stage solved in
    turn, its best value kept as a constraint for the next, each stage given an equal share of the
    `time_limit_s` seconds left, or stopped once within `gap` of its bound (Fleet.gap).
    INFEASIBLE when the required runs cannot all be scheduled within the horizon."""
    import time

    from ortools.sat.python import cp_model

    for name in stages:
        assert name in STAGES, name
    # Among equal plans, the fewest restarts (a re-plan had moved a running elastic run into pauses
    # and restarts its saved plan did not have), then a re-plan's saved placements.
    order = tuple(dict.fromkeys(stages + (("restarts",) if any(run.elastic for run in p.runs) else ())
                                + (("moved",) if p.saved is not None else ())))
    began = time.perf_counter()  # the limit counts the model's building too
    model = Model(p)
    work = 0.0
    done: list[Stage] = []
    solution: tuple[list[int], list[int]] | None = None
    segments: dict[int, list[tuple[int, int, int]]] = {}
    bought: dict[str, int] = {t: 0 for t in model.nodes}  # the greedy schedule buys nothing
    # A first schedule by list scheduling (greedy), handed to CP-SAT as a hint: on a 200-run fleet
    # its search found no schedule at all in 15 s without one (docs/benchmarks.md, fleet section).
    # Where it places every required run it is also the incumbent: a stage whose search finds no
    # schedule in its time keeps it, with the stage's bound (a 500-run fleet was answered with no
    # schedule at all where this one was complete).
    first = greedy(p)
    if not complete(p, first[0]):
        # The soonest ends can crowd later runs out; the leanest options leave them room (neither
        # complete: the one that places more runs is the better hint).
        lean = greedy(p, lean=True)
        first = lean if _placed(p, lean[0]) > _placed(p, first[0]) else first
    # A re-plan starts from its saved answer (where it places every required run): an unchanged fleet
    # re-planned within a short limit had moved runs and made more of them late than the saved plan.
    _hint(model, p.saved if p.saved is not None and complete(p, p.saved[0]) else first, bought)
    incumbent = first if complete(p, first[0]) else None
    for k, name in enumerate(order):
        expr = model.objective(name)
        model.m.minimize(expr)
        if solution is not None:
            model.m.clear_hints()
            _hint(model, solution, bought)
        # The stages share what is left of the limit less a reserve for the compaction after them
        # (0.2 s on a 200-run fleet: docs/benchmarks.md, fleet section), so the whole stays within it.
        left = time_limit_s * (1 - COMPACTION_RESERVE) - (time.perf_counter() - began)
        cp = solver(left / (len(order) - k), gap)
        status = cp.solve(model.m)
        work += cp.response_proto.deterministic_time
        rest = time_limit_s * (1 - COMPACTION_RESERVE) - (time.perf_counter() - began)
        if status == cp_model.UNKNOWN and solution is None and incumbent is None and rest > 0:
            # No schedule yet (no greedy one either): a stage that finds none ends the search, so it
            # searches on with what is left, to its first schedule, and the stages after share the
            # rest (its share alone left most of the limit unused before saying none was found).
            cp = solver(rest, gap)
            cp.parameters.stop_after_first_solution = True
            status = cp.solve(model.m)
            work += cp.response_proto.deterministic_time
        if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            if solution is None and incumbent is not None and status != cp_model.INFEASIBLE:
                # No schedule found in the time: the greedy one stands, against this stage's bound.
                value = stage_value(p, name, *incumbent, bought)
                bound = cp.best_objective_bound
                done.append(Stage(name=name, status="FEASIBLE", value=value,
                                  bound=min(value, int(round(bound))) if math.isfinite(bound) else None))
                solution = incumbent
                model.m.add(expr <= value)
                continue
            if solution is None:
                word: Status = "INFEASIBLE" if status == cp_model.INFEASIBLE else "UNKNOWN"
                short = [r for r, c in enumerate(first[0]) if c < 0 and not p.runs[r].optional]
                return Schedule(status=word, stages=[Stage(name=name, status=word)], choice=[], start=[], work_s=work,
                                unplaced=short if word == "UNKNOWN" else [])
            # The time ran out before this stage improved on the previous one's answer: keep it
            # (this stage and those after it valued at it: revalued).
            done += [Stage(name=later, status="UNKNOWN") for later in order[k:]]
            break
        value = int(round(cp.objective_value))
        bound = int(round(cp.best_objective_bound))
        # OPTIMAL is proved only where the value is its bound (a gap stop is OPTIMAL to CP-SAT).
        proof: Status = "OPTIMAL" if status == cp_model.OPTIMAL and value == bound else "FEASIBLE"
        done.append(Stage(name=name, status=proof, value=value, bound=bound))
        solution = ([next((o for o, u in enumerate(uses) if cp.value(u)), -1) for uses in model.use],
                    [cp.value(s) for s in model.start])
        from apsi.fleets.elastic import held

        segments = {r: held(cp, segs) for r, segs in model.segments.items()}
        bought = {t: cp.value(n) for t, n in model.nodes.items()}
        model.m.add(expr <= value)  # keep this stage's best for the stages after it
    assert solution is not None
    if solution is incumbent:  # an elastic run in the greedy schedule: one segment (or its fixed ones)
        from apsi.fleets.elastic import finished

        segments = {r: finished(p.runs[r]) if p.runs[r].fixed else [(c, st, p.runs[r].options[c].days)]
                    for r, (c, st) in enumerate(zip(*solution)) if p.runs[r].elastic and c >= 0}
    # Every stage's search ran to its proof: the plan repeats byte for byte.
    proved = all(s.status == "OPTIMAL" for s in done)
    final = finish(with_purchase(p, bought), *solution, segments)
    done = revalued(p, done, final["choice"], final["start"], bought, segments)
    return Schedule(status="OPTIMAL" if proved else "FEASIBLE", stages=done, **final, bought=bought,
                    segments=segments, work_s=work)


def complete(p: Program, choice: list[int]) -> bool:
    """Whether a schedule places every required run (an optional one may be left out)."""
    return all(c >= 0 or run.optional for run, c in zip(p.runs, choice))


def _placed(p: Program, choice: list[int]) -> int:
    """How many required runs a schedule places."""
    return sum(c >= 0 for run, c in zip(p.runs, choice) if not run.optional)


def greedy(p: Program, lean: bool = False) -> tuple[list[int], list[int]]:
    """A schedule by list scheduling: runs in an order that puts each after the runs it follows
    (then by deadline, then by index), each on the option that ends soonest (then the cheaper)
    at the first days its GPUs are free; `lean`, on the option of fewest GPU-days that ends within
    the horizon (then the sooner end), which leaves the most room to the runs after it. A run with
    no room is left out (choice -1): the hint is then partial, and CP-SAT repairs it."""
    horizon = p.horizon_days
    free = {t: list(days) for t, days in p.capacity.items()}
    watts = [p.power_cap_w if p.power_cap_w is not None else 0] * horizon  # power left per day
    choice, start = [-1] * len(p.runs), [run.start_after for run in p.runs]
    done: set[int] = set()
    order: list[int] = []
    pending = sorted(range(len(p.runs)), key=lambda r: (p.runs[r].deadline is None, p.runs[r].deadline or 0, r))
    while pending:  # the runs whose predecessors are placed, earliest deadline first
        r = next((r for r in pending if all(q in done for q in p.runs[r].after)), pending[0])
        pending.remove(r)
        order.append(r)
        done.add(r)
    for r, run in enumerate(p.runs):
        # Runs already running hold their GPUs first, where they are (when the GPUs are there).
        if run.started is None or not run.options or run.options[0].gpu_type not in free:
            continue
        from apsi.fleets.elastic import finished

        # (its one option from the day it started, or an elastic run's saved segments and what they leave)
        pieces = finished(run) if run.fixed else [(0, run.started, run.options[0].days)]
        if all(first + days <= horizon and all(free[run.options[o].gpu_type][d] >= run.options[o].gpus
                                                and watts[d] >= _draw(p, run.options[o]) for d in range(first, first + days))
               for o, first, days in pieces):
            choice[r], start[r] = pieces[0][0], pieces[0][1]
            for o, first, days in pieces:
                for d in range(first, first + days):
                    free[run.options[o].gpu_type][d] -= run.options[o].gpus
                    watts[d] -= _draw(p, run.options[o])
    for r in order:
        run = p.runs[r]
        if run.started is not None:
            continue  # placed above, or not at all (no room where it runs)
        if any(choice[q] < 0 for q in run.after):
            continue  # a run it follows has no room: neither has it
        earliest = max([run.start_after] + [ends_at(p, q, choice[q], start[q]) for q in run.after])
        best: tuple[int, int, int, int] | None = None  # (end, cost, option, day); lean: (GPU-days, end, ...)
        for o, opt in enumerate(run.options):
            if opt.gpu_type not in free or not opt.offered(0):
                continue  # not a type it may use, or an option only a purchase keeps (this buys nothing)
            room, day = 0, earliest
            draw = _draw(p, opt)
            for d in range(earliest, horizon):
                room = room + 1 if free[opt.gpu_type][d] >= opt.gpus and watts[d] >= draw else 0
                if room == opt.days:
                    day = d - opt.days + 1
                    key = (opt.gpus * opt.days, day + opt.days) if lean else (day + opt.days, opt.cost)
                    if best is None or key < best[:2]:
                        best = (*key, o, day)
                    break
        if best is not None:
            _, _, o, day = best
            choice[r], start[r] = o, day
            opt = run.options[o]
            for d in range(day, day + opt.days):
                free[opt.gpu_type][d] -= opt.gpus
                watts[d] -= _draw(p, opt)
    return choice, start


def _draw(p: Program, opt: Option) -> int:
    """The watts an option draws under the power cap (0 without one)."""
    return opt.gpus * p.power_w.get(opt.gpu_type, 0) if p.power_cap_w is not None else 0


def _hint(model: Model, solution: tuple[list[int], list[int]], bought: dict[str, int]) -> None:
    """The previous stage's answer as the next one's starting point (CP-SAT's add_hint)."""
    choice, start = solution
    for t, nodes in model.nodes.items():
        model.m.add_hint(nodes, bought.get(t, 0))
    for r, uses in enumerate(model.use):
        for o, u in enumerate(uses):
            model.m.add_hint(u, o == choice[r])
        model.m.add_hint(model.start[r], start[r])
