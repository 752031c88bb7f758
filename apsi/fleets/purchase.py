"""The least purchase of one GPU type that lets every run of a fleet be scheduled by its deadline.

Owns `least_nodes(program, gpu_type)`: the fleet program (apsi.fleets.program.Model) with every
required run scheduled, every deadline a hard rule, and the type's offer (Program.buy) its only
purchase, minimising the nodes bought. It answers both `apsi fleet --buy`'s alternatives (each type
on its own, so a plan names every type that works) and the plain run's remedies
(apsi.fleets.conflicts): one program, so a remedy counts every run, the dependents of a late run
included, and lets a run go wider than the inventory where its options do. Integers only (days,
GPUs, whole units of cost); apsi.fleets.api words the answer in dates and dollars.
"""

from __future__ import annotations

from apsi.fleets.program import Model, solver
from apsi.fleets.tables import Offer, Program
from apsi.model.documented import Documented


class Least(Documented):
    """The fewest nodes of one type that let every rule hold, as solved."""

    gpu_type: str
    nodes: int
    """Nodes to buy (each Offer.node_gpus GPUs), there from the offer's first day."""
    proved: bool
    """True when CP-SAT proved no fewer nodes do; False when the time limit stopped it first (the
    nodes still let every rule hold: the solve found a schedule with them)."""


def least_nodes(p: Program, gpu_type: str, seconds: float, deadlines: bool = True) -> Least | None:
    """The fewest nodes of `gpu_type` (its offer in p.buy, the only type bought) with which every
    required run is scheduled and, with `deadlines`, every run scheduled ends by its deadline; None
    when no count within the offer's most does, or none was found in `seconds`."""
    from ortools.sat.python import cp_model

    model = Model(p.model_copy(update={"buy": {gpu_type: p.buy[gpu_type]}}))
    if deadlines:
        for late in model.late.values():
            model.m.add(late == 0)  # every deadline holds (a run left out has none to miss)
    model.m.minimize(model.nodes[gpu_type])
    cp = solver(seconds)
    status = cp.solve(model.m)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return None
    nodes = cp.value(model.nodes[gpu_type])
    return Least(gpu_type=gpu_type, nodes=nodes, proved=status == cp_model.OPTIMAL and nodes == round(
        cp.best_objective_bound))


def any_type(p: Program) -> Program:
    """Program `p` with each of its types offered from day 0 at no cost (when it has no offers of its
    own), as many nodes as its runs' widest options on that type together could hold: what the
    conflicts' remedies search when a fleet names no purchase (apsi.fleets.conflicts)."""
    if p.buy:
        return p
    offers = {}
    for t in p.capacity:
        node = p.node_gpus.get(t, 1)
        most = sum(max((o.gpus for o in run.options if o.gpu_type == t), default=0) for run in p.runs)
        offers[t] = Offer(from_day=0, node_gpus=node, max_nodes=-(-most // node), cost=0)
    return p.model_copy(update={"buy": offers})
