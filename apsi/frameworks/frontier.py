"""The GPU/day frontier under a framework: at every GPU count where the fastest layout the
framework allows gets faster, that layout.

Owns frontier(framework=...) for the frameworks (the reference's is apsi.sweep). It walks the same
layouts apsi.frameworks.search does, judged by the same memory functions: for every configuration
(every knob but dp) the dps at which it fits are a suffix of its legal dps (memory falls with dp),
found by bisection; each of them is a candidate on tp x pp x cp x dp GPUs. The fastest candidate
on each GPU count, in the search's order (duration, then the configuration order), and of those
the ones faster than every count below them, are the points. So each point is the layout
plan(params, gpus=N, framework=...) chooses for its N.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from apsi.frameworks.search import Search, knobs, tie

if TYPE_CHECKING:
    from apsi.inputs import Setup


def frontier(fw, s: "Setup", pins: dict, tolerance: float) -> list:
    """The frontier's points (apsi.sweep.FrontierPoint), sorted by GPUs, days strictly falling;
    LayoutError when no layout fits."""
    import math

    from apsi.errors import LayoutError
    from apsi.frameworks.evaluate import evaluate_layout
    from apsi.model.schema import SolverReport
    from apsi.sweep import FrontierPoint
    from apsi.units import SECONDS_PER_DAY

    cap = s.gpus if s.gpus is not None else s.max_gpus
    search = Search(fw, s, s.gpu, cap, pins, tolerance)
    best: dict[int, tuple] = {}
    for c in search.configs:
        first = search._first_fit(c)
        if first is None:
            continue
        dps, ms = search.legal(c)
        per_replica = c.tp * c.pp * c.cp
        for j in range(first, len(dps)):
            gpus, secs = per_replica * dps[j], search.exact(c, dps[j], ms[j])
            old = best.get(gpus)
            if old is None or (secs, tie(c)) < old[:2]:
                best[gpus] = (secs, tie(c), c, j)
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
    for secs, _, c, j in chosen:
        p = evaluate_layout(fw, s, knobs(search, search.found(c, j)), report)
        days = secs.value / SECONDS_PER_DAY
        points.append(FrontierPoint(gpus=p.gpus, nodes=math.ceil(p.gpus / s.gpu.gpus_per_node), days=days,
                                    layout=p.layout, memory_per_gpu_gib=p.memory.total_gib,
                                    target_met=days <= s.days))
    return points
