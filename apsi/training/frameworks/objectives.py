"""The objectives a framework plan is chosen by: fewest GPUs, fewest days, least cost, least energy.

Owns each objective's key (the `objective` option, apsi.inputs.question.OBJECTIVES), the solver mode it
reports, the walk that decides it (apsi.training.frameworks.walk) with the order that walk ranks layouts
by, the weight a weighted objective puts on a GPU-second of each type, and the Note's words on
how the layouts were ranked. A new objective is one entry in OBJECTIVES plus its walk key.

The walks' orders (each then the GPU types' order, then apsi.training.frameworks.space.tie):
- gpus (min_gpus, walk.fewest): fewest GPUs meeting the target, then shortest;
- cost and energy (min_cost, min_energy, walk.cheapest): least weight x GPUs x seconds meeting the
  target ($ per GPU-second, or watts), then fewer GPUs, then shortest;
- days, and any question with its GPU count given or no layout meeting the target (fastest,
  walk.fastest): shortest within the cap, then fewer GPUs.
"""

from __future__ import annotations

from typing import Callable, Literal, NamedTuple

from apsi.catalog import GPU
from apsi.training.frameworks.bounds import Search
from apsi.training.frameworks.found import Found
from apsi.training.frameworks import kept
from apsi.training.frameworks.walk import cheapest, fewest
from apsi.inputs.question import Setup


class Objective(NamedTuple):
    key: str
    """The objective option's value."""
    mode: Literal["min_gpus", "fastest", "min_cost", "min_energy"]
    """The mode the plan's SolverReport names."""
    ranked_by: str
    """The Note's words: what the walk ranked the layouts by."""
    weight: Callable[[Setup, GPU], float | None] | None
    """Cost of one GPU-second of a type ($ or watts; None leaves the type out), for a weighted
    objective; None for an unweighted one."""


def _price(s: Setup, gpu: GPU) -> float | None:
    price = s.price_per_hour(gpu)
    return None if price is None else price / 3600


def _watts(s: Setup, gpu: GPU) -> float | None:
    return None if gpu.tdp_w is None else float(gpu.tdp_w)


FASTEST = Objective("days", "fastest", "their duration at their widest dp", None)
OBJECTIVES: dict[str, Objective] = {
    "gpus": Objective("gpus", "min_gpus", "the GPUs their duration and memory floors allow them", None),
    "days": FASTEST,
    "cost": Objective("cost", "min_cost", "the least cost their duration and memory floors allow them", _price),
    "energy": Objective("energy", "min_energy", "the least energy their duration and memory floors allow them", _watts),
}
BY_MODE = {o.mode: o for o in OBJECTIVES.values()}


def objective_of(s: Setup) -> Objective:
    """The objective the walk decides `s` by: the fastest when its GPU count is given (the GPUs one
    has) under the default objective; a cost or energy objective is kept, within that count, as the
    reference arithmetic keeps it (apsi.training.reference.planning)."""
    return FASTEST if s.gpus is not None and s.objective == "gpus" else OBJECTIVES[s.objective]


def weights(s: Setup, types: list[GPU], objective: Objective) -> list[float | None] | None:
    """Each search's cost per GPU-second under a weighted objective (`types`: each search's GPU
    type), else None."""
    weight = objective.weight
    return None if weight is None else [weight(s, gpu) for gpu in types]


def decide(objective: Objective, searches: list[Search], target: float, weights: list[float | None] | None,
           rows: list | None = None, skip: frozenset[int] = frozenset()) -> tuple[tuple[int, Found] | None, Objective]:
    """The best layout over `searches` by the objective, with the objective that decided it: the
    fastest within the cap when none meets the target (or the objective is days). `skip` leaves
    searches out (the runner-up's walk)."""
    best = None
    if objective.mode == "min_gpus":
        best = fewest(searches, target, rows, skip=skip)
    elif objective.weight is not None and weights is not None:
        best = cheapest(searches, target, weights, skip=skip)
    if best is not None:
        return best, objective
    others = [i for i in range(len(searches)) if i not in skip]
    found = kept.fastest([searches[i] for i in others])
    return (None if found is None else (others[found[0]], found[1])), FASTEST
