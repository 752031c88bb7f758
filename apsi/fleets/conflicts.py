"""What cannot be done: a minimal set of runs or deadlines in conflict, and what would resolve it.

Owns `analyse(program)`, asked when the fleet program (apsi.fleets.program) leaves a required run
out of its horizon or a deadline missed. It works on integer programs only (days, GPUs), as the
program does; apsi.fleets.api words the answer in dates.

- Which rules conflict. When the required runs cannot all be scheduled, each required run's
  being scheduled is an assumption literal; otherwise every required run is scheduled and each
  deadline is one. CP-SAT, solving under the assumptions, names a set of them that cannot hold
  together (sufficient_assumptions_for_infeasibility, as in ortools/sat/samples/
  assumptions_sample_sat.py); the set is shrunk to a minimal one by the
  deletion filter (Chinneck, Feasibility and Infeasibility in Optimization, Springer 2008): drop a
  member, solve again, and keep it dropped while the rest are still infeasible. Every member of
  the set that remains is needed: without any one of them the others can all hold.
- What would resolve it, each found by solving the changed program with every rule of the fleet
  hard (so its schedule is the check): for each GPU type the runs in conflict may use, the fewest
  whole nodes of it alone that let every rule hold, from the day they could arrive
  (apsi.fleets.purchase.least_nodes on the fleet's purchase program: its `buy:` offers and the
  options wider than the inventory they allow, else each type from day 0); for each deadline in
  conflict, the fewest days later it must be for every other deadline to hold with it, or where
  they cannot all, the set's other deadlines and those of every run after it (one solve minimising
  that run's end: the lateness never moves to the runs after it; a fleet with more than one
  conflict names the next once this one is resolved); when the runs cannot all be scheduled, the fewest days more of horizon.
"""

from __future__ import annotations

from typing import Any, Literal

from apsi.fleets.program import Model, solver
from apsi.fleets.purchase import any_type, least_nodes
from apsi.fleets.tables import Program, ProgramRun
from apsi.model.documented import Documented

Kind = Literal["runs", "deadlines"]


class Remedy(Documented):
    """One change that lets every rule hold, verified by solving the changed program."""

    kind: Literal["gpus", "deadline", "horizon"]
    """gpus: more GPUs of `gpu_type` for the whole horizon; deadline: run `run`'s deadline later;
    horizon: the horizon longer, each type keeping its last day's count."""
    gpu_type: str | None = None
    gpus: int | None = None
    """GPUs to add (whole nodes)."""
    from_day: int = 0
    """The first day the GPUs added are there (the offer's lead time)."""
    cost: int | None = None
    """What the GPUs added cost, whole units (Offer.cost per node)."""
    proved: bool = True
    """gpus: True when no fewer nodes of the type would do (proved); False when the time ran out first."""
    run: int | None = None
    """The run (index) whose deadline moves."""
    days: int | None = None
    """Days later (the deadline, or the horizon's end)."""


class Analysis(Documented):
    """A minimal conflicting set and the remedies found."""

    kind: Kind
    """runs: the required runs cannot all be scheduled; deadlines: they can, but not all by their deadlines."""
    members: list[int]
    """Run indices: each run whose being scheduled (kind runs) or whose deadline (kind deadlines) is in the set."""
    minimal: bool
    """True when every deletion test was answered (the set is minimal); False when one ran out of time."""
    remedies: list[Remedy]


def _feasible(model: Model, literals: list[Any], seconds: float) -> str:
    """CP-SAT's status under these assumptions (no objective): OPTIMAL, INFEASIBLE or UNKNOWN."""
    from ortools.sat.python import cp_model

    model.m.clear_objective()
    model.m.clear_assumptions()
    model.m.add_assumptions(literals)
    cp = solver(seconds)
    status = cp.solve(model.m)
    model.core = list(cp.sufficient_assumptions_for_infeasibility()) if status == cp_model.INFEASIBLE else []
    return {cp_model.OPTIMAL: "OPTIMAL", cp_model.FEASIBLE: "OPTIMAL", cp_model.INFEASIBLE: "INFEASIBLE"}.get(
        status, "UNKNOWN")


def analyse(p: Program, time_limit_s: float = 10.0, wider: Program | None = None,
            scheduled: bool | None = None) -> Analysis | None:
    """The minimal conflict and its remedies: among the required runs when they cannot all be
    scheduled, else among the deadlines; None when every run can be scheduled by its deadline.
    `wider` is the program with what may be bought (Program.buy) and the options it allows, its
    runs p's; default p with each type offered from day 0 (apsi.fleets.purchase.any_type).
    `scheduled` (the fleet program's answer, where known): False, the runs are analysed with all
    the time (the required runs were not all placed: on 60 runs, half the time left none found and
    the deadlines named instead); True, the deadlines; None, each half."""
    wider = any_type(p) if wider is None else wider
    if scheduled is not None:
        return _analyse(p, "deadlines" if scheduled else "runs", time_limit_s, wider)
    return _analyse(p, "runs", time_limit_s / 2, wider) or _analyse(p, "deadlines", time_limit_s / 2, wider)


def _analyse(p: Program, kind: Kind, time_limit_s: float, wider: Program) -> Analysis | None:
    """The minimal conflict of `kind` and its remedies; None when every rule of that kind can hold.
    Half the time finds the set, half the remedies: a quarter the purchases, a quarter the deadlines
    or the horizon (with a share like a deletion test's, about 0.25 s on a 22-run year, the
    purchases were dropped unproved)."""
    model = Model(p, hard=kind)
    lits = model.chosen if kind == "runs" else model.met
    index = {lit.index: r for r, lit in lits.items()}
    # The whole set's check decides whether there is a conflict at all: a quarter of the time (a
    # share like each deletion test's, 0.04 s on 60 runs, left an infeasible fleet with none),
    # the deletion filter the next quarter.
    if _feasible(model, list(lits.values()), time_limit_s / 4) != "INFEASIBLE":
        return None
    share = time_limit_s / 4 / max(1, len(lits))
    members = sorted(index[i] for i in model.core if i in index) or sorted(lits)
    minimal = True
    for r in list(members):  # the deletion filter
        rest = [lits[q] for q in members if q != r]
        status = _feasible(model, rest, share)
        if status == "INFEASIBLE":
            members.remove(r)
        elif status == "UNKNOWN":
            minimal = False
    quarter = time_limit_s / 4
    remedies = _gpu_remedies(wider, kind, members, quarter) + (
        _deadline_remedies(p, members, quarter / max(1, len(members))) if kind == "deadlines"
        else _horizon_remedy(p, quarter))
    return Analysis(kind=kind, members=members, minimal=minimal, remedies=remedies)


def _all_hold(model: Model, kind: Kind) -> None:
    """Every rule of `kind` as a constraint (an objective and assumptions do not mix in CP-SAT)."""
    for lit in (model.chosen if kind == "runs" else model.met).values():
        model.m.add(lit == 1)


def _gpu_remedies(wider: Program, kind: Kind, members: list[int], seconds: float) -> list[Remedy]:
    """For each GPU type that may be bought and that the runs in conflict may use, the fewest whole
    nodes of it alone that let every rule hold (each type `seconds` in all, shared)."""
    types = sorted({o.gpu_type for r in members for o in wider.runs[r].options if o.gpu_type in wider.buy})
    out = []
    for t in types:
        least = least_nodes(wider, t, seconds / len(types), deadlines=kind == "deadlines")
        if least is None or least.nodes == 0:
            continue  # no count of this type alone resolves it (or none was found in time)
        offer = wider.buy[t]
        out.append(Remedy(kind="gpus", gpu_type=t, gpus=least.nodes * offer.node_gpus, from_day=offer.from_day,
                          cost=least.nodes * offer.cost, proved=least.proved))
    return out


def _deadline_remedies(p: Program, members: list[int], seconds: float) -> list[Remedy]:
    """For each deadline in conflict, the fewest days later it must be with every other deadline of
    the fleet kept; where they cannot all be, with the set's other deadlines and those of every run
    after it kept (the lateness never moves to its dependents). Each is shared `seconds`."""
    from ortools.sat.python import cp_model

    out = []
    for r in members:
        for kept in (p, only(p, [q for q in members if q != r] + dependents(p, r) + [r])):
            model = Model(kept, hard="deadlines")
            for q, lit in model.met.items():
                model.m.add(lit == (0 if q == r else 1))
            model.m.minimize(model.end[r])
            cp = solver(seconds / 2)
            if cp.solve(model.m) == cp_model.OPTIMAL:
                break
        else:
            continue
        deadline = p.runs[r].deadline
        assert deadline is not None
        remedy = Remedy(kind="deadline", run=r, days=cp.value(model.end[r]) - deadline)
        if remedy.days and remedy.days > 0 and holds(apply(kept, remedy), "deadlines", seconds / 2):
            out.append(remedy)
    return out


def dependents(p: Program, r: int) -> list[int]:
    """The runs that come after run `r`, directly or through others."""
    out: list[int] = []
    grown = True
    while grown:
        more = [q for q, run in enumerate(p.runs) if q not in out and any(a == r or a in out for a in run.after)]
        out += more
        grown = bool(more)
    return sorted(out)


def _horizon_remedy(p: Program, seconds: float) -> list[Remedy]:
    """The fewest days more of horizon that let every required run be scheduled (the longest any
    run can take, end to end along its `after` chain, bounds what is tried)."""
    from ortools.sat.python import cp_model

    longest = sum(max((o.days for o in run.options), default=0) for run in p.runs)  # an optional run may have none
    longer = apply(p, Remedy(kind="horizon", days=longest))
    model = Model(longer, hard="runs")
    _all_hold(model, "runs")
    last = model.m.new_int_var(0, longer.horizon_days, "last_end")
    for e in model.end:
        model.m.add(last >= e)
    model.m.minimize(last)
    cp = solver(seconds)
    if cp.solve(model.m) != cp_model.OPTIMAL or cp.value(last) <= p.horizon_days:
        return []
    remedy = Remedy(kind="horizon", days=cp.value(last) - p.horizon_days)
    return [remedy] if holds(apply(p, remedy), "runs", seconds) else []


def only(p: Program, members: list[int]) -> Program:
    """Program `p` with the deadlines of the runs not in `members` dropped."""
    return p.model_copy(update={"runs": [run if q in members else run.model_copy(update={"deadline": None})
                                         for q, run in enumerate(p.runs)]})


def holds(p: Program, kind: Kind, seconds: float) -> bool:
    """Whether every rule of `kind` holds together in program `p` (proved by a solve)."""
    model = Model(p, hard=kind)
    return _feasible(model, list((model.chosen if kind == "runs" else model.met).values()), seconds) == "OPTIMAL"


def apply(p: Program, remedy: Remedy) -> Program:
    """Program `p` with `remedy` made."""
    if remedy.kind == "horizon":
        assert remedy.days is not None
        return p.model_copy(update={"capacity": {k: v + (v[-1],) * remedy.days for k, v in p.capacity.items()}})
    if remedy.kind == "gpus":
        assert remedy.gpu_type is not None and remedy.gpus is not None
        more = remedy.gpus
        return p.model_copy(update={"capacity": {k: tuple(c + (more if d >= remedy.from_day else 0) for d, c in enumerate(v))
                                                 if k == remedy.gpu_type else v for k, v in p.capacity.items()}})
    assert remedy.run is not None and remedy.days is not None
    runs: list[ProgramRun] = list(p.runs)
    old = runs[remedy.run].deadline
    assert old is not None
    runs[remedy.run] = runs[remedy.run].model_copy(update={"deadline": old + remedy.days})
    return p.model_copy(update={"runs": runs})
