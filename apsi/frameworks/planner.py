"""The framework planner: one entry from a question to its plan under a framework.

Owns plan(fw, setup, pins): the checks a question meets before any search (the pins, the
batch, the state no layout can shard further), one Search per GPU type and micro-batch size, the
walk the objective asks for (apsi.frameworks.walk), and the chosen layout evaluated in full
(apsi.frameworks.evaluate), with the explanation (apsi.frameworks.why) above it.

The answer is the fewest GPUs meeting the target (ties: shortest, then the GPU types' order,
lighter recomputation, smaller pp, tp, cp, vpp, ep, etp, ZeRO stage, and the first of the
framework's splits that fits), the least cost or energy meeting it, or, when none meets it or the
GPU count is given, the fastest within the cap. A Search has one micro-batch size (1 sequence
unless pinned); plan() walks one Search per size of MICRO_BATCHES and GPU type together, so the
micro-batch is chosen with the rest: under the step-time model a larger one's longer backward
hides more of the DP traffic and its GEMMs run larger, against more activation memory and, with
m falling, a larger bubble. Not the CP-SAT program: that decides the reference arithmetic
(apsi.solver), where the choices are few and linear.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from apsi.frameworks.batch import BATCH_TOLERANCE, MICRO_BATCH, micro_batch_sizes, micro_batches, sized, whole_sequences
from apsi.frameworks.bounds import Search
from apsi.frameworks.evaluate import capacity_gib, placeable
from apsi.frameworks.layouts import knobs
from apsi.frameworks.space import Config
from apsi.frameworks.walk import cheapest, fastest, fewest, ranked
from apsi.frameworks.why import _choice, _sizes_words, cost_words, time_alone
from apsi.inputs import Setup
from apsi.units import GIB

if TYPE_CHECKING:
    from apsi.model.schema import Plan


def plan(fw, s: Setup, pins: dict, tolerance: float = BATCH_TOLERANCE, explain: bool = False) -> "Plan":
    """The plan for `s` under framework `fw`: the search's layout on the best GPU type, evaluated
    in full. With `explain`, the best plan on another GPU type too (a second walk without the
    winner's type)."""
    from apsi.errors import LayoutError
    from apsi.fmt import count, duration
    from apsi.frameworks.evaluate import evaluate_layout
    from apsi.model.schema import SolverReport
    from apsi.units import SECONDS_PER_DAY

    title = fw.TITLE
    given = pins.get("micro_batch")
    pins, sizes = micro_batch_sizes(pins)
    s, placed = placeable(fw, s)
    fw.check_pins(s.model.architecture, s.seq, pins)
    fw.check_training(s.precision, s.optimizer, pins)
    whole = whole_sequences(s, tolerance)
    cap = s.gpus if s.gpus is not None else s.max_gpus
    pinned = 1
    for key in ("tp", "pp", "cp", "dp"):
        pinned *= pins.get(key, 1)
    if pinned > cap:
        raise LayoutError(f"pinned tp x pp x cp x dp = {pinned:,} GPUs exceeds the cap of {cap:,}")
    mb = pins.get("micro_batch", MICRO_BATCH)
    if "dp" in pins and micro_batches(s.batch_sequences, mb, pins["dp"], 1, tolerance) is None:
        raise LayoutError(f"dp {pins['dp']:,} with micro-batches of {mb} cannot run the batch of "
                          f"{s.batch_sequences:,} sequences within the batch tolerance of {tolerance:.0%}: the batch "
                          f"is micro-batches x {mb} x dp; widen batch_tolerance or choose another dp")
    # Every byte of model state is held at least once across the cap's GPUs, whatever the layout:
    # when even that share exceeds every GPU type's capacity, no layout fits (and the walk would
    # visit every configuration of a huge model to find so).
    share = s.model.trained_params * fw.state_bytes_per_param(s.precision, s.optimizer, pins) / cap
    if all(share > capacity_gib(s.on(gpu)) * GIB for gpu in s.candidates):
        raise LayoutError(f"no {title} layout fits within {cap:,} GPU{'s' if cap != 1 else ''} on "
                          f"{', '.join(g.name for g in s.candidates)}: the model states alone are "
                          f"{share / GIB:,.1f} GiB per GPU when spread over all of them; "
                          "try a larger-memory GPU or more GPUs")
    fastest_mode = s.objective == "days" or s.gpus is not None
    target = s.days * SECONDS_PER_DAY
    # One search per GPU type and micro-batch size, in that order: a tie goes to the earlier type,
    # then the smaller micro-batch.
    types = [gpu for gpu in s.candidates for _ in sizes]
    searches = [Search(fw, s.on(gpu), gpu, cap, sized(pins, mb), tolerance) for gpu in s.candidates for mb in sizes]
    rows = None if fastest_mode else ranked(searches, target)
    weights = _weights(s)
    weights = None if weights is None else [w for w in weights for _ in sizes]
    visited: list[tuple[int, Config, int]] = []
    if fastest_mode:
        best, mode = None, "fastest"
    elif weights is not None:
        best, mode = cheapest(searches, target, weights), f"min_{s.objective}"
    else:
        best, mode = fewest(searches, target, rows, visited=visited), "min_gpus"
    if best is None:
        best, mode = fastest(searches), "fastest"
    if best is None and not any(x.family_dps(f) for x in searches for f in x.families):
        pinned = ", ".join(f"{k} {v}" for k, v in pins.items()) or "no pins"
        raise LayoutError(f"no layout {title}'s rules allow fits within {cap:,} GPUs ({pinned}): the batch of "
                          f"{s.batch_sequences:,} sequences (within {tolerance:.0%}), {fw.DP_RULES} and "
                          f"{_whole_words(searches)} leave no dp; "
                          "change the pins, the batch or the cap")
    if best is None:
        raise LayoutError(f"no {title} layout fits within {cap:,} GPUs on {', '.join(g.name for g in s.candidates)}: "
                          "even the lightest (full recomputation, the widest TP, PP and CP the rules allow) "
                          "exceeds the memory; try a larger-memory GPU, a shorter seq or more GPUs")
    index, found = best
    search, gpu = searches[index], types[index]
    evaluations = sum(x.evaluations for x in searches)
    choice = (_choice(s, searches, types, weights, index, mode, target, rows, explain)
              if len(s.candidates) > 1 or s.skipped else None)
    one = s.on(gpu).model_copy(update={"candidates": (gpu,)})
    report = SolverReport(status="OPTIMAL", seconds=0.0, solves=0, mode=mode, method="enumeration")
    result = evaluate_layout(fw, one, knobs(search, found), report)
    n_configs = sum(x.count() for x in searches)
    order = {"min_gpus": "the GPUs the target alone allows them", "min_cost": "the least cost the target allows them",
             "min_energy": "the least energy the target allows them"}.get(mode, "their duration at their widest dp")
    note = (f"{n_configs:,} {title} layouts (dp aside){_sizes_words(given, sizes)} ranked by {order}; "
            f"{evaluations:,} memory evaluations settled the optimum; the CP-SAT program does not search "
            "framework layouts yet")
    days = found.seconds / SECONDS_PER_DAY
    if mode in ("min_cost", "min_energy"):
        binding = "time"
        what = (f"${result.cost_usd:,.0f}" if mode == "min_cost" else f"{result.energy_mwh:,.0f} MWh")
        why = (f"{s.objective} decides: {count(found.gpus)} x {gpu.name} meet the {s.days:g}-day target for {what}, "
               f"the least of every {title} layout that meets it" + (
                   " (at a flat MFU a layout's GPU-hours are its FLOPs over the peak, stretched only by its pipeline "
                   "bubble)" if s.flat_mfu else ""))
    elif mode == "min_gpus":
        # The target alone on this type, at any micro-batch: each of its searches from what it visited.
        alone = [time_alone(searches[j], [(c, start) for i, c, start in visited if i == j], target, found.gpus)
                 for j in range(len(searches)) if types[j] is gpu]
        fewer = min((x for x in alone if x is not None), default=None)
        binding = "memory" if fewer is not None and found.gpus > fewer else "time"
        stage = result.memory.peak_stage
        why = (f"memory on pipeline stage {stage} decides: the {s.days:g}-day target alone would need "
               f"{count(fewer)} x {gpu.name}, but the fewest that fit {title}'s memory are {count(found.gpus)}"
               if binding == "memory" else
               f"time decides: {count(found.gpus)} x {gpu.name} finish in {duration(days)}, and no layout on fewer "
               f"meets the {s.days:g}-day target")
    else:
        binding = "gpus" if s.gpus is not None else "max_gpus"
        # A pinned dp with one tp x pp x cp left leaves the GPU count to the pins, not to the cap.
        fixed = "dp" in pins and len({c.tp * c.pp * c.cp for x in searches for c in x.configs}) == 1
        scope = f"on the {count(found.gpus)} GPUs the pins fix" if fixed else f"within {count(cap)} GPUs"
        why = (f"{'target met' if days <= s.days else 'target not met'}: the fastest {title} layout {scope} "
               f"takes {duration(days)}")
    if result.time is not None:
        why += "; " + cost_words(result)
    notes = placed + [n for n in result.notes if n not in placed]  # evaluate_layout places (again) too
    notes = whole + notes
    return result.model_copy(update={"binding": binding, "why": why, "notes": notes + [note],
                                     "gpu_choice": choice})


def _weights(s: Setup) -> list[float | None] | None:
    """Each candidate type's cost per GPU-second ($ or watts) under the cost or energy objective."""
    if s.objective == "cost":
        return [None if s.price_per_hour(g) is None else s.price_per_hour(g) / 3600 for g in s.candidates]
    if s.objective == "energy":
        return [None if g.tdp_w is None else float(g.tdp_w) for g in s.candidates]
    return None


def _whole_words(searches: list[Search]) -> str:
    """The whole-node rule in words, for a refusal: the granularity each GPU type's count keeps."""
    sizes = sorted({x.granularity for x in searches})
    if sizes == [1]:
        return "any GPU count"
    return (f"whole nodes of {' or '.join(map(str, sizes))} GPUs (node_granularity; 1 allows any count)")
