"""The framework planner: the one entry from a question to its plan under a framework.

Owns plan(fw, setup, pins), evaluate(fw, setup, pins) (one layout given) and prepare() (the
checks a question meets before any search: the pins, the batch, the state no layout can shard
further), which the frontier (apsi.training.frameworks.frontier) meets too. plan() walks one Search per
GPU type and micro-batch size by the objective (apsi.training.frameworks.objectives, apsi.training.frameworks.walk)
and evaluates the chosen layout in full (apsi.training.frameworks.evaluate), with the explanation
(apsi.training.explain.frameworks) above it. The walks are charged to a work budget (apsi.training.frameworks.budget): a
question that would take minutes is refused in one line naming what to narrow.

The answer is the fewest GPUs meeting the target (ties: shortest, then the GPU types' order,
lighter recomputation, smaller pp, tp, cp, vpp, ep, etp, ZeRO stage, and the first of the
framework's splits that fits), the least cost or energy meeting it, or, when none meets it or the
GPU count is given, the fastest within the cap. A Search has one micro-batch size (1 sequence
unless pinned); plan() walks one Search per size of MICRO_BATCHES and GPU type together, so the
micro-batch is chosen with the rest: under the step-time model a larger one's longer backward
hides more of the DP traffic and its GEMMs run larger, against more activation memory and, with
m falling, a larger bubble. Not the CP-SAT program: that decides the reference arithmetic
(apsi.training.reference.program), where the choices are few and linear.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from apsi.training.frameworks.budget import Budget, BudgetedSearch, WorkBudgetExceeded, advice, check_dp_range
from apsi.training.frameworks import recompute
from apsi.training.frameworks.batch import (BATCH_TOLERANCE, MICRO_BATCH, micro_batch_sizes, micro_batches, micro_rule,
                                            sized, whole_sequences)
from apsi.training.frameworks.bounds import Search
from apsi.training.frameworks.evaluate import capacity_gib, placeable
from apsi.training.frameworks.layouts import knobs
from apsi.training.frameworks.space import Config, cp_floor_words, cp_unsearched
from apsi.training.frameworks.objectives import OBJECTIVES, decide, objective_of, weights
from apsi.training.frameworks.walk import ranked
from apsi.training.explain.frameworks import _sizes_words, gpu_choice, reasons
from apsi.inputs.question import Setup
from apsi.units import GIB

if TYPE_CHECKING:
    from apsi.errors import LayoutError
    from apsi.training.frameworks.interface import Framework
    from apsi.model.schema import SolverReport
    from apsi.model.schema import Plan


def prepare(fw: Framework, s: Setup, pins: dict, tolerance: float) -> tuple[Setup, dict, list[int], list[str], list[str]]:
    """The checks a question meets before any walk, shared by plan() and the frontier: a bare
    size as its shape-rule architecture, an MoE's experts placed (apsi.training.frameworks.evaluate.placeable:
    that architecture's count for memory and FLOPs alike), the framework's pin and training rules,
    the batch's whole sequences, the pinned degrees within the cap, a pinned dp that can run the
    batch, and model state that some layout could shard into memory. Returns the setup placed,
    the pins without a micro_batch of "any", the micro-batch sizes to walk, and the Notes on the
    batch's whole sequences and on the experts placed."""
    from apsi.errors import LayoutError

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
        raise LayoutError(f"no {fw.TITLE} layout fits within {cap:,} GPU{'s' if cap != 1 else ''} on "
                          f"{', '.join(g.name for g in s.candidates)}: the model states alone are "
                          f"{share / GIB:,.1f} GiB per GPU when spread over all of them; "
                          "try a larger-memory GPU or more GPUs")
    return s, pins, sizes, whole, placed


RUNNER_UP_UNSEARCHED = ("no runner-up on another GPU type: its walk would pass what this plan's walk left of the "
                        "work budget {budget}; give fewer of the {types} types (--gpu) to see it")
"""The Note of a plan whose runner-up walk (explain) the work budget refused: the plan itself stands."""


def plan(fw: Framework, s: Setup, pins: dict, tolerance: float = BATCH_TOLERANCE, explain: bool = False) -> "Plan":
    """The plan for `s` under framework `fw`: the walk's layout on the best GPU type, evaluated
    in full, with the Why line. With `explain`, the best plan on another GPU type too (a second
    walk without the winner's type), and the binding rule and Why line worked out now; without,
    they are deferred (Plan.defer: their what-if walk runs when `binding`, `why` or the JSON is
    first read, on the walk's searches and budget), and no runner-up is sought."""
    from apsi.training.frameworks.evaluate import evaluate_layout
    from apsi.model.schema import SolverReport
    from apsi.units import SECONDS_PER_DAY

    title = fw.TITLE
    given = pins.get("micro_batch")
    s, pins, sizes, whole, placed = prepare(fw, s, pins, tolerance)
    cap = s.gpus if s.gpus is not None else s.max_gpus
    objective = objective_of(s)
    target = s.days * SECONDS_PER_DAY
    # One search per GPU type and micro-batch size, in that order: a tie goes to the earlier type,
    # then the smaller micro-batch.
    types = [gpu for gpu in s.candidates for _ in sizes]
    # The work budget (apsi.training.frameworks.budget): a dp range too wide refused at once, the rest charged as it goes.
    check_dp_range(s, cap, pins, tolerance, min(sizes))
    budget = Budget(advice(s, pins, cap, sizes))
    searches: list[Search] = [BudgetedSearch(budget, fw, s.on(gpu), gpu, cap, sized(pins, mb), tolerance)
                              for gpu in s.candidates for mb in sizes]
    rows = None if objective.mode == "fastest" else ranked(searches, target)
    costs = weights(s, types, OBJECTIVES[s.objective])
    best, objective = decide(objective, searches, target, costs, rows)
    if best is None:
        raise no_layout(fw, s, searches, pins, tolerance)
    index, found = best
    search, gpu = searches[index], types[index]
    evaluations = sum(x.evaluations for x in searches)
    choice, unexplained = None, []
    if len(s.candidates) > 1 or s.skipped:
        spent = budget.used
        try:
            choice = gpu_choice(s, searches, types, costs, index, objective, target, rows, explain)
        except WorkBudgetExceeded:
            # The plan is settled; only its runner-up walk would pass the budget: the plan stands
            # without it (its explanation keeps what was left of the budget before that walk).
            budget.used = spent
            choice = gpu_choice(s, searches, types, costs, index, objective, target, rows, explain=False)
            unexplained = [RUNNER_UP_UNSEARCHED.format(budget=budget.words(), types=len(s.candidates))]
    one = s.on(gpu).model_copy(update={"candidates": (gpu,)})
    report = SolverReport(status="OPTIMAL", seconds=0.0, solves=0, mode=objective.mode, method="enumeration",
                           space=recompute.space_words(fw) + cp_floor_words(fw, s, pins))
    result = evaluate_layout(fw, one, knobs(search, found), report)
    thin = cp_unsearched(fw, s, pins) if objective.mode == "fastest" or not result.target_met else None
    n_configs = sum(x.count() for x in searches)
    note = (f"{n_configs:,} {title} layouts (dp aside){_sizes_words(given, sizes)} ranked by {objective.ranked_by}; "
            f"{evaluations:,} memory evaluations settled the optimum (the walk decides; a CP-SAT program over "
            "the same layouts is exact too but slower: docs/benchmarks.md)")
    notes = whole + placed + [n for n in result.notes if n not in placed]  # evaluate_layout places (again) too
    result = result.model_copy(update={"notes": notes + [note] + unexplained + ([thin] if thin else []),
                                       "gpu_choice": choice})

    def explained() -> tuple[str, str]:
        """The binding rule and Why line, from the walk's own searches (their memory answers kept)."""
        return reasons(fw, s, result, objective, searches, types, index, found, pins, cap)

    if explain:
        binding, why = explained()
        return result.model_copy(update={"binding": binding, "why": why})
    # Not asked to explain: the rule and its what-if walk wait until the binding or Why is read.
    return result.defer(("binding", "why"), explained)


def evaluate(fw: Framework, s: Setup, pins: dict, tolerance: float, report: "SolverReport") -> "Plan":
    """The plan of exactly the layout `pins` give (checked knobs, apsi.inputs.question.check_knobs), each
    knob left out taking the framework's default and dp the GPUs over tp x pp x cp when only
    gpus is given; the batch moves as plan() moves it (the nearest whole number of micro-batches
    within the tolerance), and a batch of part sequences gets plan()'s Note."""
    from apsi.errors import InputError
    from apsi.training.frameworks.evaluate import evaluate_layout

    k = dict(pins)
    # The settings a layout's rules do not judge (Megatron's dispatcher and EP overlap need experts).
    fw.check_pins(s.model.architecture, s.seq, {x: k[x] for x in ("dispatcher", "ep_overlap") if x in k})
    if k.get("micro_batch") == "any":
        raise InputError("evaluate() judges one layout: give micro_batch a number (\"any\" lets plan() choose it)")
    tp, pp, cp = k.get("tp") or 1, k.get("pp") or fw.DEFAULTS["pp"], k.get("cp") or fw.DEFAULTS["cp"]
    if k.get("dp") is None:
        if s.gpus is None or s.gpus % (tp * pp * cp):
            raise InputError(f"evaluate() needs dp, or gpus divisible by tp x pp x cp = {tp * pp * cp}")
        k["dp"] = s.gpus // (tp * pp * cp)
    # The batch the layout runs: as plan() takes it, the nearest whole number of micro-batches
    # (in the schedule's groups, that its rounds accept and at least its fewest) within the
    # tolerance; outside it, the framework's rule says why.
    mb, vpp = k.get("micro_batch") or 1, k.get("vpp") or 1
    group, rounds, least = micro_rule(fw, Config(0, pp, tp, cp, vpp, 1, 1, 0))
    m = micro_batches(s.batch_sequences, mb, k["dp"], group, tolerance, rounds, least)
    refused = (micro_batches(s.batch_sequences, mb, k["dp"], group, tolerance)
               if m is None and (rounds or least > 1) else None)
    if m is not None:
        k["batch_sequences"] = m * mb * k["dp"]
    elif "batch_sequences" not in k and refused is not None:
        # A whole batch within the tolerance whose count the rounds or the fewest count refuse,
        # and none they accept: the framework's rule says so, naming the counts they accept
        # (torchtitan's check_layout).
        k["batch_sequences"] = refused * mb * k["dp"]
    elif "batch_sequences" not in k and group == 1:
        # No whole batch within the tolerance: said with the nearest (a dp past the batch, or one
        # far from its divisors), as plan() takes a batch, before the framework's bare rule (the
        # interleaved schedule's groups keep the framework's own words: MLM-SCHED).
        from apsi.errors import LayoutError

        nearest = micro_batches(s.batch_sequences, mb, k["dp"], group, math.inf, rounds, least)
        plain = micro_batches(s.batch_sequences, mb, k["dp"], group, math.inf)
        assert nearest is not None and plain is not None  # within an infinite tolerance
        near = nearest * mb * k["dp"]
        # A nearer whole count the schedule refuses is named with the schedule's rule.
        rule = (f"torch's 1F1B runs no fewer micro-batches than its {pp} stages" if plain < least else
                f"torch's interleaved schedule refuses {plain:,} micro-batches, not a multiple of max(1, {plain:,} // {pp})")
        skipped = (f" the schedule runs ({plain * mb * k['dp']:,} sequences is nearer, but {rule})"
                   if plain != nearest else "")
        raise LayoutError(f"the batch of {s.batch_sequences:,} sequences is no whole number of micro-batches of {mb}"
                          f" on each of {k['dp']:,} data-parallel replicas within the batch tolerance of "
                          f"{tolerance:.0%}: the nearest{skipped} is {near:,} sequences "
                          f"({(near - s.batch_sequences) / s.batch_sequences:+.1%}); give a dp nearer a divisor of "
                          "the batch, a wider batch_tolerance or another batch")
    whole = whole_sequences(s, tolerance)
    result = evaluate_layout(fw, s, {**k, "tp": tp}, report)
    return result.model_copy(update={"notes": whole + result.notes}) if whole else result


def no_layout(fw: Framework, s: Setup, searches: list[Search], pins: dict, tolerance: float) -> LayoutError:
    """The refusal when the walk found no layout (plan() and the frontier): the rules, the batch
    and whole nodes leave no dp at all, or some dp is left and nothing fits the memory."""
    from apsi.errors import LayoutError

    cap = s.gpus if s.gpus is not None else s.max_gpus
    pinned = ", ".join(f"{k} {v}" for k, v in pins.items())
    # The rules' configurations whatever their memory (a search keeps those whose floor may fit):
    # none with a dp means the rules, the batch and whole nodes leave none; else the memory decides.
    from apsi.training.frameworks.space import configs

    def legal(x: Search) -> bool:
        shapes = configs(fw, s, x.gpu, cap, pins, math.inf).shapes
        return any(x._legal_of(f.micro, f.step, f.first.tp * f.first.pp * f.first.cp)[0]
                   for shape in shapes for g in shape.groups for f in g.families(math.inf))

    if not any(legal(x) for x in searches):
        return LayoutError(f"no layout {fw.TITLE}'s rules allow fits within {cap:,} GPUs ({pinned or 'no pins'}): the "
                           f"batch of {s.batch_sequences:,} sequences (within {tolerance:.0%}), {fw.DP_RULES} and "
                           f"{_whole_words(searches)} leave no dp; change the pins, the batch or the cap")
    gpus = ", ".join(g.name for g in s.candidates)
    # Every type was tried where several were: another is advice only for one.
    other = "a larger-memory GPU, " if len(s.candidates) == 1 else ""
    if not pins:
        return LayoutError(f"no {fw.TITLE} layout fits within {cap:,} GPUs on {gpus}: even the lightest (full "
                           f"recomputation, the widest TP, PP and CP the rules allow) exceeds the memory; try {other}"
                           "a shorter seq or more GPUs")
    free = [d.upper() for d in ("tp", "pp", "cp") if d not in pins]
    light = (([] if "recompute" in pins else ["full recomputation"])
             + ([f"the widest {' and '.join(free)} the rules allow"] if free else []))
    return LayoutError(f"no {fw.TITLE} layout with {pinned} fits within {cap:,} GPUs on {gpus}: even the lightest the "
                       f"pins allow{' (' + ', '.join(light) + ')' if light else ''} exceeds the memory; release a pin, "
                       f"or try {other}a shorter seq or more GPUs")


def _whole_words(searches: list[Search]) -> str:
    """The whole-node rule in words, for a refusal: the granularity each GPU type's count keeps."""
    sizes = sorted({x.granularity for x in searches})
    if sizes == [1]:
        return "any GPU count"
    return f"whole nodes of {' or '.join(f'{n:,}' for n in sizes)} GPUs (node_granularity; 1 allows any count)"
