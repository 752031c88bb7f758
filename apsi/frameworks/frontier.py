"""The GPU/day frontier under a framework: at every GPU count where the fastest layout the
framework allows gets faster, that layout.

Owns frontier(framework=...) for the frameworks (the reference's is apsi.sweep). It walks the same
layouts the walk (apsi.frameworks.walk) does, judged by the same memory functions: for every configuration
(every knob but dp) the dps at which it fits are a suffix of its legal dps (memory falls with dp),
found by bisection; each of them is a candidate on tp x pp x cp x dp GPUs. The fastest candidate
on each GPU count, in the search's order (duration, then the configuration order), and of those
the ones faster than every count below them, are the points. So each point is the layout
plan(params, gpus=N, framework=...) chooses for its N.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from apsi.frameworks.batch import micro_batch_sizes, sized, whole_sequences
from apsi.frameworks.bounds import Search
from apsi.frameworks.layouts import knobs
from apsi.frameworks.space import tie

if TYPE_CHECKING:
    from apsi.inputs import Setup


MAX_CANDIDATES = 2_000_000
"""The most (configuration, dp) candidates one frontier weighs: past it the answer would take
minutes and gigabytes (a 7B model at seq 1 on up to a million GPUs has hundreds of millions)."""


def frontier(fw, s: "Setup", pins: dict, tolerance: float) -> list:
    """The frontier's points (apsi.sweep.FrontierPoint), sorted by GPUs, days strictly falling;
    LayoutError when no layout fits."""
    import math

    from apsi.errors import LayoutError
    from apsi.frameworks.evaluate import evaluate_layout
    from apsi.model.schema import SolverReport
    from apsi.model.schema import FrontierPoint
    from apsi.units import SECONDS_PER_DAY

    whole_sequences(s, tolerance)  # a batch of part sequences beyond the tolerance is refused, as by plan()
    cap = s.gpus if s.gpus is not None else s.max_gpus
    # One search per micro-batch size, as plan() walks them (a tie goes to the smaller size).
    pins, sizes = micro_batch_sizes(pins)
    searches = [Search(fw, s, s.gpu, cap, sized(pins, mb), tolerance) for mb in sizes]
    # Every (configuration, dp) of one micro-batch is a candidate: bound their number before
    # listing any (each size is weighed in a pass of its own).
    bounds = [sum(min(cap // f.per_replica, int(x.b_max // x.mb) // f.group) // f.step * f.count(x.capacity)
                  for f in x.families) for x in searches]
    if max(bounds) > MAX_CANDIDATES:
        x = searches[bounds.index(max(bounds))]
        widest = int(x.b_max // x.mb)
        configs = sum(f.count(x.capacity) for f in x.families)
        raise LayoutError(f"the {fw.TITLE} frontier would weigh up to {max(bounds):,} layouts (every dp up to "
                          f"{min(cap, widest):,} for each of {configs:,} configurations at micro-batch {x.mb}); at most "
                          f"{MAX_CANDIDATES:,}: give a smaller max_gpus, a smaller batch, a longer seq or a micro_batch")
    best: dict[int, tuple] = {}
    for k, search in enumerate(searches):
        _weigh(search, k, best)
    if not best:
        raise LayoutError(f"no {fw.TITLE} layout fits within {cap:,} GPUs on {s.gpu.name}: even the lightest (full "
                          "recomputation, the widest TP, PP and CP the rules allow) exceeds the memory; try a "
                          "larger-memory GPU, a shorter seq or more GPUs")
    chosen = []
    for gpus in sorted(best):
        if not chosen or best[gpus][0] < chosen[-1][0]:
            chosen.append(best[gpus])
    report = SolverReport(status="OPTIMAL", seconds=0.0, solves=0, mode="fastest", method="enumeration")
    points = []
    for secs, k, _, c, j in chosen:
        p = evaluate_layout(fw, s, knobs(searches[k], searches[k].found(c, j)), report)
        days = secs.value / SECONDS_PER_DAY
        points.append(FrontierPoint(gpus=p.gpus, nodes=math.ceil(p.gpus / s.gpu.gpus_per_node), days=days,
                                    layout=p.layout, memory_per_gpu_gib=p.memory.total_gib,
                                    target_met=days <= s.days))
    return points


def _weigh(search: Search, k: int, best: dict[int, tuple]) -> None:
    """Put the fastest layout of `search` (micro-batch k's) on each GPU count into `best` where it
    beats what is there ((seconds, k, tie, configuration, dp index) by GPUs).

    Every (configuration, dp) candidate by GPUs, then its duration floor (Search.dp_floor), so that
    one whose floor already exceeds the fastest this pass found on as many GPUs or fewer is never
    evaluated: it can neither win its count nor make it a point (a faster layout on fewer GPUs
    exists). The prefix minimum over GPU counts is a Fenwick tree."""
    import math

    candidates = []
    for c in search.configs:
        dps, ms = search.legal(c)
        per_replica = c.tp * c.pp * c.cp
        candidates += [(search.dp_floor(c, dp, m), per_replica * dp, c, j) for j, (dp, m) in enumerate(zip(dps, ms))]
    counts = sorted({gpus for _, gpus, _, _ in candidates})
    where = {gpus: i + 1 for i, gpus in enumerate(counts)}
    tree = [math.inf] * (len(counts) + 1)

    def record(i: int, value: float) -> None:
        while i <= len(counts):
            tree[i] = min(tree[i], value)
            i += i & -i

    def fastest_up_to(i: int) -> float:
        out = math.inf
        while i > 0:
            out = min(out, tree[i])
            i -= i & -i
        return out

    candidates.sort(key=lambda x: (x[1], x[0], tie(x[2]), x[3]))  # by GPUs, then floor: fewer GPUs settle first
    for floor, gpus, c, j in candidates:
        if floor > fastest_up_to(where[gpus]) * (1 + 1e-9):
            continue
        dps, ms = search.legal(c)
        if search.fits(c, dps[j], ms[j]) is None:
            continue
        secs = search.exact(c, dps[j], ms[j])
        record(where[gpus], secs.value)
        old = best.get(gpus)
        if old is None or (secs, k, tie(c)) < old[:3]:
            best[gpus] = (secs, k, tie(c), c, j)
