"""The GPU/day frontier under a framework: at every GPU count where the fastest layout the
framework allows gets faster, that layout.

Owns frontier(framework=...) for the frameworks (the reference's is apsi.api.frontier). It asks the walks
(apsi.training.frameworks.walk) of the plan, over the same Search objects, so the layouts, their memory and
their durations are the plan's. Write f(N) for the duration of the fastest layout on at most N
GPUs: it falls with N, in steps, and the points are its steps. They are a chain:

- the first point is the fewest GPUs at which any layout fits, with its fastest layout there
  (fewest() with no target: fewest GPUs, then the shortest);
- after a point (G, T), f is T on every count from G until the smallest count at which some
  layout is strictly faster than T; that count is the next point, and its layout, the fastest on
  it, is the fastest on at most that many GPUs (every layout on fewer is T or slower). Both are
  one fewest() walk with `below` = T: the fewest GPUs at which a layout beats T, and of those the
  shortest;
- the chain ends when no layout within the cap beats the last point: it is the fastest there.

Each walk is exact (tests/test_search.py), so the frontier is: each point is the layout
plan(params, gpus=N, objective="days", framework=...) chooses for its N (tests/test_frontier.py),
with the plan's tie-break (the shortest, then the micro-batch sizes' order, then tie()). "Faster"
is Seconds' order, as the plan's: durations within a billionth of each other tie.

The walks of a chain share their work (walk.faster): the Search objects, whose floors and
durations are kept, a queue of the groups and families still in play whose bounds only rise along
the chain, and for each configuration the first dp not yet ruled out, so the chain costs little
more than its longest walk times its points.

Worked example (Llama 3.1 70B, 15T tokens, H100, Megatron): 124 points from 16 to 8,560 GPUs,
each a whole number of 8-GPU nodes and the plan's layout at its count, in 125 walks (the last
finds nothing faster); with node_granularity 1, 163 points.
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Callable

from apsi.training.frameworks.budget import Budget, BudgetedSearch, advice, check_dp_range
from apsi.training.frameworks import recompute
from apsi.training.frameworks.batch import sized
from apsi.training.frameworks.layouts import knobs
from apsi.training.frameworks.planner import no_layout, prepare
from apsi.training.frameworks.walk import faster

if TYPE_CHECKING:
    from apsi.training.frameworks.bounds import Search
    from apsi.training.frameworks.interface import Framework
    from apsi.training.frameworks.found import Found, Seconds
    from apsi.inputs.question import Setup


MAX_POINTS = 5_000
"""The most points one frontier lists: each is a walk of the layout space (a few milliseconds
for a small model), and a small model on short sequences has a point at nearly every GPU count
(a 7B model at seq 1: 2,227 points up to 66,592 GPUs)."""

MAX_FRONTIER_GPUS = 250_000
"""The largest cap a frontier takes, as the reference frontier draws (apsi.api.frontier): above the
default max_gpus (200,000), so no default question is refused for its cap alone. Past it a
small model's legal dps alone are lists of a million entries per micro-batch group."""


def frontier(fw: Framework, s: "Setup", pins: dict, tolerance: float,
             progress: Callable[[int, int], None] | None = None) -> list:
    """The frontier's points (apsi.model.schema.FrontierPoint), sorted by GPUs, days strictly
    falling; LayoutError when no layout fits, when the cap is over MAX_FRONTIER_GPUS or when the
    frontier has over MAX_POINTS points. `progress(points, gpus)` is told each point as the chain
    finds it."""
    import math

    from apsi.errors import LayoutError
    from apsi.training.frameworks.evaluate import evaluate_layout
    from apsi.model.schema import FrontierPoint, SolverReport
    from apsi.units import SECONDS_PER_DAY

    cap = s.gpus if s.gpus is not None else s.max_gpus
    if cap > MAX_FRONTIER_GPUS:
        raise LayoutError(f"the {fw.TITLE} frontier is drawn up to {MAX_FRONTIER_GPUS:,} GPUs, one walk of the layouts "
                          f"per point, and {cap:,} were asked for: give a max_gpus of at most {MAX_FRONTIER_GPUS:,}")
    # The checks plan() makes before its walk (the experts placed, the pins, the batch), then one
    # search per micro-batch size, as plan() walks them (a tie goes to the smaller size).
    s, pins, sizes, _, _ = prepare(fw, s, pins, tolerance)
    # The work budget (apsi.training.frameworks.budget), shared by the chain's walks: past it, the refusal names the
    # cap up to which the points were found.
    check_dp_range(s, cap, pins, tolerance, min(sizes))
    budget = Budget(advice(s, pins, cap, sizes), frontier=True)
    searches: list[Search] = [BudgetedSearch(budget, fw, s, s.gpu, cap, sized(pins, mb), tolerance)
                              for mb in sizes]
    # Every group, at first at the least GPUs it has: faster() raises the bounds as it goes.
    queue = [(group.per_replica, i, (group.index,), search.group_k(group), group)
             for i, search in enumerate(searches) for group in search.groups]
    heapq.heapify(queue)
    memo: dict = {}
    first = faster(searches, None, 0, queue, memo)
    if first is None:
        raise no_layout(fw, s, searches, pins, tolerance)
    chain = [first]
    while True:
        point = chain[-1]
        if progress is not None:
            progress(len(chain), point[1].gpus)
        if len(chain) >= MAX_POINTS:
            raise LayoutError(f"the {fw.TITLE} frontier has over {MAX_POINTS:,} points within {cap:,} GPUs (the "
                              f"{MAX_POINTS:,}th at {point[1].gpus:,}): give a max_gpus of at most "
                              f"{point[1].gpus:,}, a longer seq or a micro_batch")
        budget.progress = (f" (the frontier's first {len(chain):,} point{'s' if len(chain) > 1 else ''} reach "
                           f"{point[1].gpus:,} GPUs: max_gpus {point[1].gpus:,} draws them)")
        after = faster(searches, _seconds(searches, point), point[1].gpus, queue, memo)
        if after is None:  # nothing within the cap beats the last point: it is the fastest there
            break
        assert after[1].gpus > point[1].gpus, (point, after)
        chain.append(after)
    report = SolverReport(status="OPTIMAL", seconds=0.0, solves=0, mode="fastest", method="enumeration",
                           space=recompute.space_words(fw))
    points = []
    for k, found in chain:
        p = evaluate_layout(fw, s, knobs(searches[k], found), report)
        days = found.seconds / SECONDS_PER_DAY
        points.append(FrontierPoint(gpus=p.gpus, nodes=math.ceil(p.gpus / s.gpu.gpus_per_node), days=days,
                                    layout=p.layout, memory_per_gpu_gib=p.memory.total_gib,
                                    target_met=days <= s.days))
    return points


def _seconds(searches: list[Search], answer: tuple[int, "Found"]) -> "Seconds":
    """The exact duration of a walk's answer (index into `searches`, Found)."""
    k, found = answer
    return searches[k].exact(found.config, found.dp, found.micro_batches, found.split)
